"""LocalGpuPool scheduling and fault isolation, with stand-in worker processes (no GPU)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from workers import Job, LocalGpuPool, MeasurementStatus
from workers.testing import StandinCompiler, standin_artifact, standin_worker_main

WORKLOAD = {"op": "gemm", "params": {"m": 64, "n": 64, "k": 64, "dtype": "float16"}}
OK, TIMEOUT, CRASH = MeasurementStatus.OK, MeasurementStatus.TIMEOUT, MeasurementStatus.CRASH


def job(
    behaviour: str = "ok", name: str = "k", latency_us: float = 10.0, deadline_s: float = 10.0
) -> Job:
    return Job(
        workload=WORKLOAD,
        artifact=standin_artifact(behaviour, latency_us=latency_us, name=name),
        deadline_s=deadline_s,
    )


@pytest.fixture
def pool() -> Iterator[LocalGpuPool]:
    with LocalGpuPool(
        ["0", "1"], worker_entry=standin_worker_main, compiler=StandinCompiler()
    ) as executor:
        yield executor


def test_order_is_preserved_and_jobs_spread_over_workers(pool: LocalGpuPool) -> None:
    jobs = [job(name=f"k{i}", latency_us=20_000.0) for i in range(8)]
    results = pool.measure(jobs)
    assert [r.log for r in results] == [f"k{i}" for i in range(8)]
    assert all(r.status is OK for r in results)
    assert {r.device_index for r in results} == {0, 1}
    assert pool.capacity() == 2
    assert [fp["name"] for fp in pool.fingerprints] == ["stand-in", "stand-in"]


def test_hang_times_out_and_the_worker_is_replaced(pool: LocalGpuPool) -> None:
    start = time.perf_counter()
    results = pool.measure([job("hang", deadline_s=1.0), *[job(name=f"k{i}") for i in range(4)]])
    assert results[0].status is TIMEOUT and "deadline" in results[0].error
    assert [r.status for r in results[1:]] == [OK] * 4
    assert time.perf_counter() - start < 30
    # Both workers serve the next batch: the killed one was respawned.
    again = pool.measure([job(name=f"j{i}", latency_us=50_000.0) for i in range(4)])
    assert all(r.status is OK for r in again)
    assert {r.device_index for r in again} == {0, 1}


def test_warm_waits_for_the_workers_and_warms_the_compiler() -> None:
    class Compiler(StandinCompiler):
        warmed = 0

        def warm(self) -> None:
            self.warmed += 1

    compiler = Compiler()
    with LocalGpuPool(["0", "1"], worker_entry=standin_worker_main, compiler=compiler) as two:
        two.warm()
        assert compiler.warmed == 1 and compiler.batches == []  # no jobs: nothing measured
        assert not two._startup.is_alive()  # both workers have started
        assert [r.status for r in two.measure([job(), job(name="b")])] == [OK, OK]


def test_warm_measures_its_jobs_once_and_a_broken_one_is_no_error() -> None:
    """The warm-up jobs go through the whole path (compile, worker); their results are
    dropped, a failing one included, and the pool serves runs as before."""
    compiler = StandinCompiler()
    with LocalGpuPool(["0"], worker_entry=standin_worker_main, compiler=compiler) as one:
        one.warm([job(name="warm-a"), job("wrong", name="warm-b")])
        assert compiler.batches == [2]
        assert [r.status for r in one.measure([job(name="run")])] == [OK]


def test_a_kernel_timed_again_is_not_compiled_again() -> None:
    """Re-timings (the search's leaders, the finalists) reuse the pool's compile; a
    failed compile is tried again."""
    compiler = StandinCompiler()
    with LocalGpuPool(["0"], worker_entry=standin_worker_main, compiler=compiler) as one:
        assert [r.status for r in one.measure([job(name="a"), job(name="b")])] == [OK, OK]
        assert [r.status for r in one.retime_interleaved([job(name="a")], rounds=2)] == [OK]
        one.measure([job("syntax")])
        one.measure([job("syntax")])
    assert compiler.batches == [2, 1, 1]


def test_dead_worker_is_a_crash_and_is_replaced() -> None:
    with LocalGpuPool(["0"], worker_entry=standin_worker_main, compiler=StandinCompiler()) as one:
        results = one.measure([job("die"), job(name="after")])
        assert results[0].status is CRASH and "exit code 1" in results[0].error
        assert results[1].status is OK and results[1].log == "after"


def test_sticky_error_report_is_a_crash_and_next_job_is_ok() -> None:
    with LocalGpuPool(["0"], worker_entry=standin_worker_main, compiler=StandinCompiler()) as one:
        results = one.measure([job("crash"), job(name="after"), job("wrong")])
        assert [r.status for r in results] == [CRASH, OK, MeasurementStatus.WRONG_RESULT]


def test_compile_errors_never_reach_a_worker(pool: LocalGpuPool) -> None:
    results = pool.measure([job(name="a"), job("syntax", name="b"), job(name="c")])
    assert [r.status for r in results] == [OK, MeasurementStatus.COMPILE_ERROR, OK]
    assert "error" in results[1].error and results[1].device_index is None


def test_retime_interleaved_pools_rounds(pool: LocalGpuPool) -> None:
    jobs = [job(name="fast", latency_us=5.0), job(name="slow", latency_us=9.0)]
    fast, slow = pool.retime_interleaved(jobs, rounds=3)
    assert fast.status is OK and len(fast.samples_us) == 9 and fast.latency_us == 5.0
    assert slow.latency_us == 9.0
    broken = pool.retime_interleaved([job("wrong"), job()], rounds=2)
    assert broken[0].status is MeasurementStatus.WRONG_RESULT and broken[1].status is OK


def test_worker_that_cannot_start_gives_crash_results() -> None:
    with LocalGpuPool(
        ["0"], worker_entry=_failing_entry, compiler=StandinCompiler(), startup_timeout_s=20
    ) as broken:
        (result,) = broken.measure([job()])
        assert result.status is CRASH and "did not start" in result.error


def _failing_entry(conn, visible_device, config) -> None:
    conn.send({"type": "fatal", "error": "no CUDA device"})


class SlowCompiler(StandinCompiler):
    """A stand-in compiler that takes ``seconds`` per batch and records when it ran."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.spans: list[tuple[float, float]] = []

    def compile_many(self, requests, default_arch):
        start = time.monotonic()
        time.sleep(self.seconds)
        results = super().compile_many(requests, default_arch)
        self.spans.append((start, time.monotonic()))
        return results


def test_prepare_compiles_the_next_batch_while_this_one_is_measured() -> None:
    compiler = SlowCompiler(seconds=0.5)
    with LocalGpuPool(["0"], worker_entry=standin_worker_main, compiler=compiler,
                      batch_size=16) as one:
        assert one.batch_size() == 16
        first = [job(name=f"a{i}", latency_us=150_000.0) for i in range(4)]  # 0.6 s on the GPU
        second = [job(name=f"b{i}") for i in range(4)] + [job("syntax", name="bad")]
        one.prepare(first)
        measured_first = one.measure(first)
        one.prepare(second)
        one.prepare(second)  # twice: compiled once
        started = time.monotonic()
        measured_second = one.measure(second)
        waited = time.monotonic() - started
    assert all(r.status is OK for r in measured_first)
    assert [r.status for r in measured_second] == [OK] * 4 + [MeasurementStatus.COMPILE_ERROR]
    assert compiler.batches == [4, 5]  # each batch compiled once, by prepare
    assert waited < 0.5 + 0.3  # the second batch's compile had (nearly) finished


def test_prepare_overlaps_the_measurement_of_the_previous_batch() -> None:
    import threading

    compiler = SlowCompiler(seconds=0.3)
    with LocalGpuPool(["0"], worker_entry=standin_worker_main, compiler=compiler) as one:
        first = [job(name=f"a{i}", latency_us=200_000.0) for i in range(4)]  # 0.8 s
        second = [job(name=f"b{i}") for i in range(4)]
        one.prepare(first)
        spans: list[tuple[float, float]] = []

        def measure_first() -> None:
            start = time.monotonic()
            one.measure(first)
            spans.append((start, time.monotonic()))

        thread = threading.Thread(target=measure_first)
        thread.start()
        time.sleep(0.1)
        one.prepare(second)  # while the first batch is on the "GPU"
        thread.join()
        one.measure(second)
    (first_start, first_end), = spans
    second_compile_start, _ = compiler.spans[1]
    assert first_start < second_compile_start < first_end  # compile overlapped timing
    assert compiler.batches == [4, 4]
