"""Liveness (``/healthz``) and Prometheus metrics (``/metrics``)."""

from __future__ import annotations

import time
import weakref
from functools import cache
from importlib.metadata import PackageNotFoundError, version

import anyio
from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from service.api.deps import DatabaseDep, MetricsDep, RunManagerDep
from service.core.db import Database
from service.core.metrics import CONTENT_TYPE_LATEST
from service.db.schema import revision as schema_revision
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


#: Seconds a successful query of the database answers for: under load the query (a
#: thread and a round trip) was most of a health check's time. A failed one is never
#: reused, and the SQLite file's check (a stat) runs on every call.
PROBE_REUSE_S = 1.0
_last_ok: weakref.WeakKeyDictionary[Database, tuple[float, str | None]] = (
    weakref.WeakKeyDictionary()
)


def _query(db: Database) -> tuple[str | None, str]:
    """The schema version and ``ok``, or None and why the database is unusable."""
    try:
        return schema_revision(db, read=True), "ok"
    except Exception as exc:  # any driver error means "not healthy", not a 500
        return None, f"unavailable: {type(exc).__name__}"


async def _probe(db: Database) -> tuple[str | None, str]:
    problem = db.problem()
    if problem is not None:
        return None, f"unavailable: {problem}"
    last = _last_ok.get(db)
    if last is not None and time.monotonic() - last[0] < PROBE_REUSE_S:
        return last[1], "ok"
    schema, database = await anyio.to_thread.run_sync(_query, db, limiter=_PROBES)
    if database == "ok":
        _last_ok[db] = (time.monotonic(), schema)
    return schema, database


@router.get("/healthz", response_model=HealthPublic, responses={503: {"model": HealthPublic}})
async def healthz(db: DatabaseDep, manager: RunManagerDep) -> JSONResponse:
    """Liveness: the process answers and its database is usable (503 if it is
    unreachable, or its SQLite file was deleted or replaced; a successful query of the
    database is at most a second old)."""
    schema, database = await _probe(db)
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
