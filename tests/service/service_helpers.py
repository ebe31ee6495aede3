"""Helpers of the service tests: settings, request bodies, waiting for a run."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
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
