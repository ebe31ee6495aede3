"""The command line as a new user meets it: each operator's parameters under ``--help``,
one device syntax for every command, dtype shorthands, ``--version``, progress on long
commands, and ``serve`` saying where its database is."""

from __future__ import annotations

import json
import sys

import pytest

from service.cli import main
from service.commands._params import parse_params
from service.commands.serve import describe_database

SMALL = ["--m", "64", "--n", "64", "--k", "64"]
#: A GEMM whose simulated runs find schedules within a few trials.
TUNED = ["--m", "1024", "--n", "1024", "--k", "1024"]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exit_info:
        code = int(exit_info.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", ["tune", "space", "render"])
def test_help_lists_every_operators_parameters(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, command, "gemm", "--help")
    assert code == 0
    for flag in ("--m INT (1..", "--b-layout {kn,nk} [kn]", "--kv-heads INT",
                 "--chunk-size INT", "--causal [true|false] [False]", "bf16 = bfloat16"):
        assert flag in out, (flag, out)
    assert "sim:h200" in out and "cuda:N" in out  # the one device syntax


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "--version")
    assert code == 0 and out.startswith("pipetune ") and out.split()[1][0].isdigit()


@pytest.mark.parametrize(("typed", "meant"),
                         [("fp16", "float16"), ("half", "float16"), ("bf16", "bfloat16"),
                          ("BF16", "bfloat16"), ("bfloat16", "bfloat16"),
                          ("fp8", "float8_e4m3"), ("e5m2", "float8_e5m2")])
def test_dtype_shorthands(typed: str, meant: str) -> None:
    assert parse_params("gemm", [*SMALL, "--dtype", typed])["dtype"] == meant
    assert parse_params("gemm", [*SMALL, "--out-dtype", typed])["out_dtype"] == meant


def test_space_takes_the_api_device_names_and_shows_progress_on_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    # Attention's small space: the command walks the whole space (a GEMM's is 3x larger).
    attention = ["--batch", "1", "--heads", "8", "--kv-heads", "8", "--seq", "256",
                 "--head-dim", "128", "--causal"]
    code, out, err = _run(capsys, "space", "attention", *attention, "--dtype", "bf16",
                          "--device", "sim:h100", "--json", "--top", "1")
    assert code == 0, err
    report = json.loads(out)
    assert report["device"]["name"].startswith("NVIDIA H100")
    assert report["params"]["dtype"] == "bfloat16"
    assert "enumerating tiles" in err and "ranking schedules" in err


@pytest.mark.parametrize("command", ["space", "render", "tune"])
@pytest.mark.parametrize(("device", "says"), [
    ("h200", "the simulated H200 is sim:h200"),
    ("b200", "use one of auto, sim:a10, sim:a100, sim:a40, sim:h100, sim:h200, sim:l40s, "
             "sim:rtx4090, cuda:N"),
])
def test_an_unknown_device_is_refused_with_the_names_to_use(
    command: str, device: str, says: str, capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    extra = {"render": ["--out", str(tmp_path)],
             "tune": ["--database-url", f"sqlite:///{tmp_path / 'cli.db'}"]}.get(command, [])
    code, out, err = _run(capsys, command, "gemm", *SMALL, "--device", device, *extra)
    assert code == 2 and out == ""
    assert "device" in err and f"'{device}'" in err and says in err, err


def test_describe_database_names_the_file_or_hides_the_password() -> None:
    assert describe_database("sqlite:////data/pipetune.db") == "/data/pipetune.db (SQLite)"
    shown = describe_database("postgresql+psycopg://tuner:secret@db:5432/pipetune")
    assert "secret" not in shown and "db:5432/pipetune" in shown


def test_a_simulated_tune_writes_its_rendered_kernel(
    capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    out_file = tmp_path / "kernel.json"
    code, out, err = _run(capsys, "tune", "gemm", *TUNED, "--device", "sim:h200", "--trials",
                          "4", "--database-url", f"sqlite:///{tmp_path / 'cli.db'}",
                          "--kernel-out", str(out_file))
    assert code == 0, err
    artifact = json.loads(out_file.read_text())
    assert artifact["op"] == "gemm" and "__global__" in artifact["source"]
    assert f"kernel artifact written to {out_file}" in out


def test_kernel_out_fails_loudly_when_there_is_no_kernel(
    capsys: pytest.CaptureFixture[str], tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import codegen

    monkeypatch.setattr(codegen, "has_renderer", lambda op: False)
    out_file = tmp_path / "kernel.json"
    code, _, err = _run(capsys, "tune", "gemm", *TUNED, "--device", "sim:h200", "--trials",
                        "4", "--database-url", f"sqlite:///{tmp_path / 'cli.db'}",
                        "--kernel-out", str(out_file))
    assert code == 1 and not out_file.exists()
    assert "--kernel-out: nothing to write" in err, err


def test_a_fused_epilogue_is_tuned_from_sub_field_flags(
    capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    out_file = tmp_path / "kernel.json"
    code, _, err = _run(capsys, "tune", "gemm", *TUNED, "--epilogue.bias", "--epilogue.act",
                        "gelu", "--device", "sim:h200", "--trials", "4", "--database-url",
                        f"sqlite:///{tmp_path / 'cli.db'}", "--kernel-out", str(out_file))
    assert code == 0, err
    artifact = json.loads(out_file.read_text())
    assert artifact["params"]["epilogue"] == {"scale": 1.0, "bias": True, "act": "gelu",
                                              "residual": False}
    assert "act_gelu" in artifact["source"]
    assert [a["name"] for a in artifact["args"] if a["kind"] == "tensor" and
            a["role"] == "input"] == ["bias"]
    code, _, err = _run(capsys, "tune", "gemm", *TUNED, "--epilogue.act", "tanh",
                        "--device", "sim:h200", "--database-url",
                        f"sqlite:///{tmp_path / 'cli.db'}")
    assert code != 0 and "epilogue.act" in err


def test_seq_gives_attention_one_tied_range() -> None:
    """``--seq LOW:HIGH`` sets seq_q and seq_kv to the same range: self-attention's axis."""
    params = parse_params("attention", ["--seq", "128:16384", "--heads", "8"])
    assert params["seq_q"] == params["seq_kv"] == {"min": 128, "max": 16384}
    assert parse_params("attention", ["--seq", "1,7,64"])["seq_kv"] == [1, 7, 64]
    assert parse_params("attention", ["--seq", "512"])["seq_q"] == 512
