"""Liveness (``/healthz``) and Prometheus metrics (``/metrics``)."""

from __future__ import annotations

from functools import cache
from importlib.metadata import PackageNotFoundError, version

import anyio
from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

import migrations
from service.api.deps import DatabaseDep, MetricsDep, RunManagerDep
from service.core.db import Database
from service.core.metrics import CONTENT_TYPE_LATEST
from service.schemas import HealthPublic

router = APIRouter(tags=["health"])

#: The database probe's own threads: a server busy with requests still answers /healthz.
_PROBES = anyio.CapacityLimiter(2)


@cache
def _version() -> str:
    try:
        return version("pipetune")
    except PackageNotFoundError:
        return "unknown"


def _probe(db: Database) -> tuple[str | None, str]:
    """The schema version and ``ok``, or None and why the database is unusable."""
    problem = db.problem()
    if problem is not None:
        return None, f"unavailable: {problem}"
    try:
        with db.read_engine.connect() as connection:
            return migrations.revision_of(connection), "ok"
    except Exception:  # no version table yet, or the database is down
        pass
    try:  # Alembic's own answer: None before the first upgrade, or the driver's error
        return migrations.current(db.url, engine=db.read_engine), "ok"
    except Exception as exc:  # any driver error means "not healthy", not a 500
        return None, f"unavailable: {type(exc).__name__}"


@router.get("/healthz", response_model=HealthPublic, responses={503: {"model": HealthPublic}})
async def healthz(db: DatabaseDep, manager: RunManagerDep) -> JSONResponse:
    """Liveness: the process answers and its database is usable (503 if it is
    unreachable, or its SQLite file was deleted or replaced)."""
    schema, database = await anyio.to_thread.run_sync(_probe, db, limiter=_PROBES)
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
