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


def test_back_to_back_cycles_enough_input_copies_to_miss_l2() -> None:
    class Tensor:
        def __init__(self, mib: int) -> None:
            self.mib = mib

        def numel(self) -> int:
            return self.mib << 19

        def element_size(self) -> int:
            return 2

    class Cuda:
        @staticmethod
        def get_device_properties(index: int):
            return type("Props", (), {"L2_cache_size": 60 << 20})()

    torch = type("Torch", (), {"cuda": Cuda})
    # 3 x 60 MiB of L2 over 96 MiB per copy: 2 copies; tiny inputs: at most 8.
    assert launch_overhead.copies_for_cold_l2(torch, (Tensor(32), Tensor(32), Tensor(32))) == 2
    assert launch_overhead.copies_for_cold_l2(torch, (Tensor(1),)) == 8
    assert launch_overhead.copies_for_cold_l2(torch, (Tensor(400),)) == 1
