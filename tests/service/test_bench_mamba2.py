"""bench/mamba2.py without a GPU: its cases are docs/benchmarks.md's, the listing runs, and the
re-timing of a kernel against the peer keeps the kernel's figures when the peer fails."""

from __future__ import annotations

from types import ModuleType, SimpleNamespace

import pytest
from service_helpers import FixedLatencyPool, bench_module


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return bench_module("mamba2")


def test_cases_are_the_suite_and_its_further_cases(bench: ModuleType) -> None:
    from scheduler_search.ops.suites import mamba2_suite

    cases = bench.suite()
    for variant, (op, extra) in bench.VARIANTS.items():
        mine = [c for c in cases if bench.variant_of(c["op"], c["params"]) == variant]
        assert {c["op"] for c in mine} == {op}
        in_suite = [c["params"] for c in mine if c["in_suite"]]
        assert in_suite == [{**p, **extra} for p in mamba2_suite()]  # fp16, 80 heads, ...
        names = [bench.case_name(op, {**c["params"], "dtype": d})
                 for c in mine for d in c["dtypes"]]
        assert names == [f"{variant}-1x1024-g1-fp16", f"{variant}-1x16384-g1-fp16",
                         f"{variant}-8x4096-g1-fp16", f"{variant}-8x4096-g1-bf16",
                         f"{variant}-64x4096-g1-fp16", f"{variant}-8x4096-g8-fp16"]
    assert bench.VARIANTS["state16"][1] == {"states_in_fp32": False}


def test_list_prints_the_selected_cases(bench: ModuleType,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    bench.main(["list", "--only", "scan-8x4096"])
    lines = capsys.readouterr().out.splitlines()[1:]
    assert [line.split()[0] for line in lines] == [
        "scan-8x4096-g1-fp16", "scan-8x4096-g1-bf16", "scan-8x4096-g8-fp16"]
    assert all("mamba_ssm_chunk_scan" in line for line in lines)
    assert lines[0].split()[2:4] == ["86.4", "901.8"]  # GFLOP, MB moved


@pytest.mark.parametrize("peer_us", [300.0, None])
def test_retime_interleaves_kernel_and_peer(bench: ModuleType, peer_us: float | None) -> None:
    op = "mamba2_chunk_scan"
    params = bench.case_params("scan", 8, 4096, 1, "float16")
    pool = FixedLatencyPool(150.0, peer_us, error="mamba_ssm: not importable")
    args = SimpleNamespace(rounds=3, deadline=30.0)
    record = bench._retime(pool, op, params, artifact="kernel", final=None, args=args)
    assert len(pool.rounds) == 3
    assert all([j.baseline for j in r] == [None, "mamba_ssm_chunk_scan"] for r in pool.rounds)
    assert record["pipetune_us"] == 150.0 and record["peer"] == "mamba_ssm_chunk_scan"
    assert record["pipetune_tbps"] == pytest.approx(901.8e6 / 150.0 / 1e6, rel=1e-3)
    if peer_us is None:
        assert "ratio" not in record and "not importable" in record["peer_error"]
    else:
        assert record["ratio"] == pytest.approx(2.0) and "peer_error" not in record
    means = bench._geomeans([{**record, "op": op, "params": params, "in_suite": True}])
    assert means["scan"]["suite_cases"] == (0 if peer_us is None else 1)
    assert means["state"]["suite_cases"] == means["state16"]["suite_cases"] == 0
