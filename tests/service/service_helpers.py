"""Helpers of the service tests: request bodies, waiting for a run."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient

SMALL_GEMM = {"m": 1024, "n": 1024, "k": 1024, "dtype": "float16"}


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
