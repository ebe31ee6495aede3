"""The Executor contract, written once and run over every executor.

Executors: the local pool with stand-in workers (no GPU), the simulated device (the cost
model) and, with the ``gpu`` marker, the local pool on real GPUs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import pytest

from workers import (
    Executor,
    Job,
    LocalGpuPool,
    MeasurementStatus,
    ParallelCompiler,
    SimulatedDevice,
)
from workers.testing import (
    StandinCompiler,
    gemm_tiled_artifact,
    standin_artifact,
    standin_worker_main,
)

GEMM = {"m": 256, "n": 256, "k": 128, "dtype": "float16", "b_layout": "kn"}
WORKLOAD = {"op": "gemm", "params": GEMM}
BROKEN_SOURCE = 'extern "C" __global__ void gemm_tiled( {}'


@dataclasses.dataclass
class Case:
    """An executor under test, how to make a good or a broken job for it, and what a
    broken job's status and every result's ``simulated`` flag must be."""

    executor: Executor
    make: Callable[[str], Job]
    broken_status: MeasurementStatus = MeasurementStatus.COMPILE_ERROR
    simulated: bool = False


def _standin() -> Case:
    pool = LocalGpuPool(["0", "1"], worker_entry=standin_worker_main, compiler=StandinCompiler())

    def make(kind: str) -> Job:
        behaviour = {"good": "ok", "broken": "syntax"}[kind]
        return Job(workload=WORKLOAD, artifact=standin_artifact(behaviour, name=kind))

    return Case(pool, make)


def _local_gpu(tmp_dir: str) -> Case:
    pool = LocalGpuPool(compiler=ParallelCompiler(cache_dir=tmp_dir))

    def make(kind: str) -> Job:
        artifact = gemm_tiled_artifact(GEMM)
        if kind == "broken":
            artifact = dataclasses.replace(artifact, source=BROKEN_SOURCE)
        return Job(workload=WORKLOAD, artifact=artifact)

    return Case(pool, make)


def _simulated() -> Case:
    from scheduler_search.hardware import get_device
    from scheduler_search.ops import parse_spec
    from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED
    from scheduler_search.sprogram import plan_sprogram

    device = SimulatedDevice("sim:h200", capacity=4)
    design = plan_sprogram(parse_spec("gemm", GEMM), get_device("sim:h200"),
                           GEMM_WARP_SPECIALIZED)
    good = Job(workload=WORKLOAD, schedule=design.to_dict())
    assert device.measure_one(good).status.is_ok(), "the design could not be estimated"
    broken = Job(workload=WORKLOAD, schedule={"version": -1})

    def make(kind: str) -> Job:
        return good if kind == "good" else broken

    return Case(device, make, MeasurementStatus.LAUNCH_ERROR, simulated=True)


@pytest.fixture(
    scope="class",
    params=["standin", "simulated", pytest.param("local_gpu", marks=pytest.mark.gpu)],
)
def case(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Case]:
    if request.param == "standin":
        made = _standin()
    elif request.param == "simulated":
        made = _simulated()
    else:
        made = _local_gpu(str(tmp_path_factory.mktemp("cubins")))
    with made.executor:
        yield made


class TestExecutorContract:
    def test_capacity_is_positive(self, case: Case) -> None:
        assert case.executor.capacity() >= 1

    def test_one_measurement_per_job_in_order(self, case: Case) -> None:
        kinds = ["good", "broken", "good", "good", "broken"]
        results = case.executor.measure([case.make(k) for k in kinds])
        assert len(results) == len(kinds)
        expected = {"good": MeasurementStatus.OK, "broken": case.broken_status}
        assert [r.status for r in results] == [expected[k] for k in kinds]
        assert all(r.simulated is case.simulated for r in results)

    def test_empty_batch_and_measure_one(self, case: Case) -> None:
        assert case.executor.measure([]) == []
        result = case.executor.measure_one(case.make("good"))
        assert result.status.is_ok() and result.latency_us is not None and result.latency_us > 0
        assert result.samples_us and result.min_us <= result.latency_us <= result.max_us

    def test_retime_interleaved_pools_rounds(self, case: Case) -> None:
        good, broken = case.make("good"), case.make("broken")
        retimed = case.executor.retime_interleaved([good, broken, good], rounds=2)
        assert [r.status for r in retimed] == [MeasurementStatus.OK, case.broken_status,
                                               MeasurementStatus.OK]
        assert len(retimed[0].samples_us) >= 2
