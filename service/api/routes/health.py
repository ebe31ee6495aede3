"""Liveness (``/healthz``) and Prometheus metrics (``/metrics``)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

import migrations
from service.api.deps import DatabaseDep, MetricsDep, RunManagerDep
from service.core.metrics import CONTENT_TYPE_LATEST
from service.schemas import HealthPublic

router = APIRouter(tags=["health"])


def _version() -> str:
    try:
        return version("pipetune")
    except PackageNotFoundError:
        return "unknown"


@router.get("/healthz", response_model=HealthPublic, responses={503: {"model": HealthPublic}})
def healthz(db: DatabaseDep, manager: RunManagerDep) -> JSONResponse:
    """Liveness: the process answers and its database is reachable (503 if not)."""
    try:
        schema = migrations.current(db.url, engine=db.read_engine)
        database = "ok"
    except Exception as exc:  # any driver error means "not healthy", not a 500
        schema, database = None, f"unavailable: {type(exc).__name__}"
    body = HealthPublic(
        status="ok" if database == "ok" else "degraded",
        database=database,
        schema_version=schema,
        runs_active=len(manager.active_runs),
        version=_version(),
    )
    return JSONResponse(body.model_dump(), status_code=200 if database == "ok" else 503)


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
def metrics(metrics: MetricsDep) -> Response:
    """Prometheus metrics in the text exposition format."""
    return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)
