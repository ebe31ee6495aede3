"""The search driver's peer jobs: further baselines timed only in the final interleaved
re-timing, after the finalists and the reference job, in the same call, and handed back
by name in ``SearchResult.peers`` (a failed one as it failed, never failing the search).
"""

from __future__ import annotations

from typing import Any

import optuna
import search_fakes as fakes

from scheduler_search.search import Budget, SearchConfig, SearchDriver

optuna.logging.set_verbosity(optuna.logging.WARNING)

REFERENCE = "cublas"
#: Baseline latencies of the stand-in executor (``None``: that baseline fails).
BASELINE_US: dict[str, float | None] = {REFERENCE: 11.0, "flash": 13.0, "triton": 9.5,
                                        "broken": None}


def _executor(width: int = 3, kernels_fail: bool = False) -> Any:
    """A RecordingExecutor that also answers the baseline jobs (plain names)."""

    def latency(job: Any) -> float:
        value = BASELINE_US[job] if isinstance(job, str) else fakes.latency_of(job)
        assert value is not None
        return value

    def fail(job: Any) -> bool:
        if isinstance(job, str):
            return BASELINE_US[job] is None
        return kernels_fail

    return fakes.RecordingExecutor(width=width, latency=latency, fail=fail)


def _driver(executor: Any, **kwargs: Any) -> SearchDriver:
    return SearchDriver(fakes.TinySpace(size=5), executor, lambda program: program,
                        estimator=fakes.latency_of, budget=Budget(trials=6),
                        config=SearchConfig(retime_top_k=2), **kwargs)


def _status(measurement: Any) -> str:
    return str(measurement.status.value)


def test_peers_are_retimed_after_the_finalists_and_the_reference() -> None:
    executor = _executor()
    result = _driver(executor, reference_job=REFERENCE,
                     peer_jobs={"flash": "flash", "triton": "triton"}).run()
    # No search round waits for a vendor library: baselines are timed only at the end.
    assert executor.batches and not any(
        job in (REFERENCE, "flash", "triton") for batch in executor.batches for job in batch)
    # One interleaved re-timing: the two finalists, the reference, then the peers in order.
    (retimed,) = executor.retimed
    assert len(retimed) == 5 and not any(isinstance(job, str) for job in retimed[:2])
    assert retimed[2:] == [REFERENCE, "flash", "triton"]
    assert [f.schedule_hash for f in result.finalists] == [job.hash for job in retimed[:2]]
    assert result.reference is not None and result.reference.latency_us == 11.0
    assert list(result.peers) == ["flash", "triton"]
    assert {name: m.latency_us for name, m in result.peers.items()} == {
        "flash": 13.0, "triton": 9.5}
    assert result.best is not None
    assert result.best.latency_us == min(fakes.latency_of(job) for job in retimed[:2])


def test_peers_without_a_reference_follow_the_finalists() -> None:
    executor = _executor()
    result = _driver(executor, peer_jobs={"flash": "flash"}).run()
    (retimed,) = executor.retimed
    assert retimed[-1] == "flash" and len(retimed) == 3
    assert result.reference is None and result.peers["flash"].latency_us == 13.0
    assert len(result.finalists) == 2


def test_a_failed_peer_is_handed_back_as_it_failed() -> None:
    executor = _executor()
    result = _driver(executor, reference_job=REFERENCE,
                     peer_jobs={"broken": "broken", "flash": "flash"}).run()
    broken = result.peers["broken"]
    assert _status(broken) == "launch_error" and broken.latency_us is None
    assert broken.error == "boom"
    assert _status(result.peers["flash"]) == "ok" and result.peers["flash"].latency_us == 13.0
    assert result.reference is not None and result.reference.latency_us == 11.0
    assert len(result.finalists) == 2 and result.best is not None


def test_no_peers_keeps_the_retiming_as_it_was() -> None:
    executor = _executor()
    result = _driver(executor, reference_job=REFERENCE).run()
    (retimed,) = executor.retimed
    assert len(retimed) == 3 and retimed[-1] == REFERENCE
    assert result.peers == {}


def test_baselines_are_not_timed_without_a_finalist() -> None:
    executor = _executor(kernels_fail=True)  # every kernel fails: nothing to re-time
    result = _driver(executor, reference_job=REFERENCE, peer_jobs={"flash": "flash"}).run()
    assert executor.retimed == [] and result.best is None
    assert result.peers == {} and result.reference is None
