"""``pipetune render``: writes <hash>.cu and <hash>.json for the top schedules."""

from __future__ import annotations

from pathlib import Path

import pytest

from codegen import KernelArtifact
from service.cli import main


def test_render_writes_sources_and_launch_contracts(tmp_path: Path) -> None:
    out = tmp_path / "kernels"
    code = main(
        [
            "render",
            "gemm",
            "--m",
            "128",  # a small space: the command ranks all of it
            "--n",
            "128",
            "--k",
            "128",
            "--dtype",
            "bfloat16",
            "--b-layout",
            "nk",
            "--top",
            "2",
            # The slice with two warp-specialised consumers, 8-row tiles and no cluster: a
            # second to rank, not 15 (its top two, one persistent, are the whole ws x 2
            # slice's top two).
            "--fix",
            "warp_specialized=true",
            "consumer_warpgroups=2",
            "tile_m=8",
            "cluster_size=1",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    sources = sorted(out.glob("*.cu"))
    contracts = sorted(out.glob("*.json"))
    assert len(sources) == len(contracts) == 2
    for source, contract in zip(sources, contracts, strict=True):
        artifact = KernelArtifact.from_json(contract.read_text())
        assert source.stem == contract.stem == artifact.schedule_hash
        assert artifact.source == source.read_text()
        assert artifact.params["b_layout"] == "nk" and "bf16" in artifact.source
        assert "constexpr int CONSUMERS = 2;" in artifact.source  # the --fix slice


def test_render_rejects_bad_parameters(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = main(["render", "gemm", "--m", "512", "--n", "512", "--k", "-1", "--out", str(tmp_path)])
    assert code == 2
    assert "k" in capsys.readouterr().err


@pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="nvcc is not on PATH")
def test_render_check_compiles_for_the_device_s_architecture(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """On a simulated A100 the kernels are sm_80 code, and ``--check`` builds them so."""
    code = main(["render", "gemm", "--m", "256", "--n", "256", "--k", "256", "--device",
                 "sim:a100", "--top", "1", "--fix", "warp_specialized=true",
                 "consumer_warpgroups=1", "--check", "--out", str(tmp_path)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "[nvcc:" in printed and "FAILED" not in printed and "0 B spilled" in printed
    (contract,) = tmp_path.glob("*.json")
    assert KernelArtifact.from_json(contract.read_text()).compile_options[-1] == "-arch=sm_80"
