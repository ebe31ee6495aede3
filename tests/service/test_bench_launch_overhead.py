"""bench/launch_overhead.py on the CPU: its cases are workloads the service accepts (the
issue's GEMM shapes and an attention kernel), and the case filter selects by prefix."""

from __future__ import annotations

from bench import launch_overhead
from scheduler_search.ops import parse_spec


def test_cases_are_valid_workloads() -> None:
    ops = set()
    for op, params in launch_overhead.CASES.values():
        spec = parse_spec(op, params)
        assert spec.params()["dtype"] == params["dtype"]
        ops.add(op)
    assert ops == {"gemm", "attention"}
    gemms = [p for op, p in launch_overhead.CASES.values() if op == "gemm"]
    assert {(p["m"], p["n"], p["k"]) for p in gemms} == {
        (4096, 4096, 4096), (4000, 6000, 2000), (128, 8192, 8192)}
