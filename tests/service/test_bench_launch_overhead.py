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


def test_figures_are_interleaved_after_a_cool_down(monkeypatch) -> None:
    """Both kernels of a ratio are timed in the same clock state: rounds alternate which
    goes first, each after an idle pause."""
    events: list[str] = []

    class Cuda:
        @staticmethod
        def synchronize() -> None:
            events.append("sync")

    class Torch:
        cuda = Cuda

    monkeypatch.setattr(launch_overhead.time, "sleep", lambda s: events.append(f"sleep {s}"))

    def timed(label: str) -> float:
        events.append(label)
        return 1.0 if label == "pipetune" else 2.0

    samples = launch_overhead.interleaved(Torch, timed, 3, 0.25)
    assert samples == {"pipetune": [1.0] * 3, "peer": [2.0] * 3}
    order = [e for e in events if e in ("pipetune", "peer")]
    assert order == ["pipetune", "peer", "peer", "pipetune", "pipetune", "peer"]
    assert events[:3] == ["sync", "sleep 0.25", "pipetune"]
    assert events.count("sleep 0.25") == 6
