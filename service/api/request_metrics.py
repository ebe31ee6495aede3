"""Every request counted and timed by route, as a plain ASGI middleware.

Starlette's ``BaseHTTPMiddleware`` (``@app.middleware("http")``) wraps each request in a
task and a memory stream; this one only watches the response's status go by.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class RequestMetrics:
    """Counts requests by method, route template and status, and observes their latency,
    in the app's :class:`service.core.metrics.Metrics` (``app.state.metrics``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            template = route_template(scope)
            metrics: Any = scope["app"].state.metrics
            metrics.http_requests.labels(scope["method"], template, str(status)).inc()
            metrics.http_latency.labels(template).observe(time.perf_counter() - started)


def route_template(scope: Scope) -> str:
    """The matched route's path template with its router prefixes (``/v1/runs/{run_id}``),
    so that metrics are labelled by route, not by id."""
    route = scope.get("route")
    regex = getattr(route, "path_regex", None)
    if route is None or regex is None:
        return "unmatched"
    path = scope.get("path", "")
    for start in range(len(path) + 1):
        if regex.match(path[start:]):
            return path[:start] + route.path
    return route.path
