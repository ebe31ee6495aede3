"""bench/mamba2_ssd.py on the CPU: its cases cover what the issue asks (the suite, ngroups
8, bf16, headdim 128, the layer's options, seq_idx), every option is an argument of the
drop-in, and the calls it times pass the same arguments to both sides."""

from __future__ import annotations

import inspect

import pytest

from bench import mamba2_ssd as bench
from pipetune.torch import DropIns


def test_cases_cover_the_issue_s_shapes_and_options() -> None:
    names = [c.name for c in bench.CASES]
    assert len(set(names)) == len(names)
    suite = [(c.batch, c.seqlen) for c in bench.CASES if c.name.startswith("suite")]
    assert suite == [(1, 1024), (1, 16384), (8, 4096), (64, 4096)]
    assert {c.ngroups for c in bench.CASES} >= {1, 8}
    assert {c.dtype for c in bench.CASES} == {"float16", "bfloat16"}
    assert {c.headdim for c in bench.CASES} == {64, 128}
    assert {c.chunk_size for c in bench.CASES} == {128, 256}
    options = {o for c in bench.CASES for o in c.options}
    accepted = set(inspect.signature(DropIns.mamba_chunk_scan_combined).parameters)
    assert options - {"d_per_channel"} <= accepted  # d_per_channel is D's shape
    assert {"z", "seq_idx", "initial_states", "dt_bias"} <= options


def test_both_sides_get_the_same_arguments() -> None:
    case = bench.CASES[6]
    args = {n: n for n in ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "dt_softplus")}
    positional = bench._positional(args, case)
    keywords = bench._keywords(args)
    assert positional == {"x": "x", "dt": "dt", "A": "A", "B": "B", "C": "C",
                          "chunk_size": case.chunk_size}
    assert keywords["return_final_states"] is True
    assert {"D", "z", "dt_bias", "dt_softplus"} <= set(keywords)
    assert "seq_idx" not in keywords and "initial_states" not in keywords


def test_list_names_every_case(capsys) -> None:  # type: ignore[no-untyped-def]
    assert bench.main(["list"]) == 0
    printed = capsys.readouterr().out.split("\n")
    assert [line.split(" ")[0] for line in printed if line] == [c.name for c in bench.CASES]


def test_each_form_of_the_scan_is_tuned_as_the_drop_in_asks_for_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``--scans in_tile`` tunes the scan computing C Bᵀ in its tile; ``cb`` the one
    reading cb; ``searched`` both, into one cache, for the drop-in to choose."""
    import types

    import pipetune
    torch = pytest.importorskip("torch")
    asked: list[tuple[str, dict]] = []

    def tune(op: str, **kw: object) -> object:
        asked.append((op, kw))
        return types.SimpleNamespace(status="succeeded", kernel={}, run={}, schedule={})

    monkeypatch.setattr(pipetune, "tune", tune)
    case = bench.CASES[2]
    seqlen = 2 * case.chunk_size  # a small copy of the case: two chunks
    x = torch.zeros(case.batch, seqlen, case.nheads, case.headdim, dtype=torch.float16)
    b = torch.zeros(case.batch, seqlen, case.ngroups, case.dstate, dtype=torch.float16)
    args = {"x": x, "B": b, "D": torch.zeros(case.nheads)}
    tuned = {scan: set(bench.tune_kernels(case, args, 1.0, "sqlite://", scan))
             for scan in bench.SCANS}
    assert tuned == {"cb": {"mamba2_chunk_state", "mamba2_chunk_scan"},
                     "in_tile": {"mamba2_chunk_state", "mamba2_chunk_scan+cb_in_tile"},
                     "searched": {"mamba2_chunk_state", "mamba2_chunk_scan",
                                  "mamba2_chunk_scan+cb_in_tile"}}
    scans = [kw for op, kw in asked if op == "mamba2_chunk_scan"]
    assert [bool(kw.get("cb_in_tile")) for kw in scans] == [False, True, False, True]
