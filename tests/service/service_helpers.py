"""Helpers of the service tests: settings, request bodies, waiting for a run, the bench
scripts as modules and a pool that answers with fixed latencies."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from fastapi.testclient import TestClient

from service.core.config import Settings

SMALL_GEMM = {"m": 1024, "n": 1024, "k": 1024, "dtype": "float16"}


def service_settings(database_url: str, directory: Path) -> Settings:
    """What the service tests run with: small limits, fast heartbeats."""
    return Settings(
        database_url=database_url,
        data_dir=directory,
        max_concurrent_runs=2,
        simulated_capacity=8,
        heartbeat_s=0.5,
        stale_after_s=5.0,
        warm_start=4,
    )


def tune_body(params: dict[str, Any] | None = None, trials: int = 16, **extra: Any) -> dict:
    return {
        "op": "gemm",
        "params": params or SMALL_GEMM,
        "device": "sim:h200",
        "budget": {"trials": trials},
        **extra,
    }


def wait_for(
    client: TestClient, run_id: int, done: Callable[[dict], bool] | None = None,
    timeout_s: float = 120.0,
) -> dict:
    """Poll a run until ``done`` (default: finished); its JSON."""
    done = done or (lambda run: run["status"] not in ("queued", "running"))
    deadline = time.monotonic() + timeout_s
    while True:
        run = client.get(f"/v1/runs/{run_id}").json()
        if done(run):
            return run
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} still {run['status']} after {timeout_s} s")
        time.sleep(0.2)


def bench_module(name: str) -> ModuleType:
    """``bench/<name>.py`` loaded as a module (the scripts are not a package)."""
    path = Path(__file__).resolve().parents[2] / "bench" / f"{name}.py"
    module_spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


class FixedLatencyPool:
    """Answers each round of jobs with ``latencies`` in order (None: that job fails with
    ``error``, as an unavailable peer does); keeps the rounds."""

    def __init__(self, *latencies: float | None, error: str = "peer unavailable") -> None:
        self.latencies = latencies
        self.error = error
        self.rounds: list[list[Any]] = []

    def measure(self, jobs: list[Any]) -> list[Any]:
        from workers import Measurement, MeasurementStatus

        self.rounds.append(jobs)
        return [Measurement(MeasurementStatus.LAUNCH_ERROR, error=self.error)
                if us is None else Measurement.from_samples([us], rel_error=1e-3,
                                                            error_bound=1e-2)
                for us in self.latencies[: len(jobs)]]
