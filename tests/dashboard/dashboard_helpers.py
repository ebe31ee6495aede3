"""Helpers of the dashboard tests."""

from __future__ import annotations

from typing import Any


def posted_run(body: dict[str, Any]) -> dict[str, Any]:
    """The run a ``POST /v1/tune`` answered with, in either shape of its response: the run
    itself, or the run nested under ``"run"`` (beside the cache entry, when there is one)."""
    nested = body.get("run")
    return nested if isinstance(nested, dict) else body
