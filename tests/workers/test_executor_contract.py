"""The Executor contract, written once and run over every executor.

Executors: the local pool with stand-in workers (no GPU) and, with the ``gpu`` marker, the
local pool on real GPUs. The simulated executor joins this list when it exists.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import pytest

from workers import Executor, Job, LocalGpuPool, MeasurementStatus, ParallelCompiler
from workers.testing import (
    StandinCompiler,
    gemm_tiled_artifact,
    standin_artifact,
    standin_worker_main,
)

GEMM = {"m": 256, "n": 256, "k": 128, "dtype": "float16", "b_layout": "kn"}
WORKLOAD = {"op": "gemm", "params": GEMM}
BROKEN_SOURCE = 'extern "C" __global__ void gemm_tiled( {}'


def _standin() -> tuple[Executor, Callable[[str], Job]]:
    pool = LocalGpuPool(["0", "1"], worker_entry=standin_worker_main, compiler=StandinCompiler())

    def make(kind: str) -> Job:
        behaviour = {"good": "ok", "broken": "syntax"}[kind]
        return Job(workload=WORKLOAD, artifact=standin_artifact(behaviour, name=kind))

    return pool, make


def _local_gpu(tmp_dir: str) -> tuple[Executor, Callable[[str], Job]]:
    pool = LocalGpuPool(compiler=ParallelCompiler(cache_dir=tmp_dir))

    def make(kind: str) -> Job:
        artifact = gemm_tiled_artifact(GEMM)
        if kind == "broken":
            artifact = dataclasses.replace(artifact, source=BROKEN_SOURCE)
        return Job(workload=WORKLOAD, artifact=artifact)

    return pool, make


@pytest.fixture(scope="class", params=["standin", pytest.param("local_gpu", marks=pytest.mark.gpu)])
def executor(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Executor, Callable[[str], Job]]]:
    if request.param == "standin":
        pool, make = _standin()
    else:
        pool, make = _local_gpu(str(tmp_path_factory.mktemp("cubins")))
    with pool:
        yield pool, make


class TestExecutorContract:
    def test_capacity_is_positive(self, executor: tuple[Executor, Callable[[str], Job]]) -> None:
        pool, _ = executor
        assert pool.capacity() >= 1

    def test_one_measurement_per_job_in_order(
        self, executor: tuple[Executor, Callable[[str], Job]]
    ) -> None:
        pool, make = executor
        kinds = ["good", "broken", "good", "good", "broken"]
        results = pool.measure([make(k) for k in kinds])
        assert len(results) == len(kinds)
        expected = {"good": MeasurementStatus.OK, "broken": MeasurementStatus.COMPILE_ERROR}
        assert [r.status for r in results] == [expected[k] for k in kinds]
        assert all(not r.simulated for r in results)

    def test_empty_batch_and_measure_one(
        self, executor: tuple[Executor, Callable[[str], Job]]
    ) -> None:
        pool, make = executor
        assert pool.measure([]) == []
        result = pool.measure_one(make("good"))
        assert result.status.is_ok() and result.latency_us is not None and result.latency_us > 0
        assert result.samples_us and result.min_us <= result.latency_us <= result.max_us
