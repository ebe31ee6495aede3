"""Prometheus metrics of one app, in a registry of its own (so that several apps, as in
tests, never register the same metric twice)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]


class Metrics:
    """The service's metrics.

    Attributes:
        http_requests: requests by method, route template and status code.
        http_latency: request duration by route template (seconds).
        tune_requests: ``POST /v1/tune`` outcomes (cache_hit, new_run, joined_run, invalid).
        trials: trials stored, by status (ok, invalid, render_error, compile_error, ...) and
            simulated.
        runs_finished: runs that ended, by final status.
        runs_active: runs this process is executing now.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.http_requests = Counter(
            "pipetune_http_requests",
            "HTTP requests by method, route and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.http_latency = Histogram(
            "pipetune_http_request_duration_seconds",
            "HTTP request duration by route.",
            ["route"],
            registry=self.registry,
        )
        self.tune_requests = Counter(
            "pipetune_tune_requests", "Tune requests by outcome.", ["outcome"],
            registry=self.registry,
        )
        self.trials = Counter(
            "pipetune_trials", "Trials stored, by status.", ["status", "simulated"],
            registry=self.registry,
        )
        self.runs_finished = Counter(
            "pipetune_runs_finished", "Runs ended, by status.", ["status"],
            registry=self.registry,
        )
        self.runs_active = Gauge(
            "pipetune_runs_active", "Runs this process is executing.", registry=self.registry
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
