"""What the dashboard draws, as JSON: a run's convergence and parameter importance, and
the cost model's per-sEU timeline and the kernel source of a run's best schedule or of a
cached one."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import PlainTextResponse

from service.api.deps import DatabaseDep, InsightsDep, SessionDep
from service.db import repositories as repo
from service.db.models import DeviceModel, RunModel, ScheduleModel
from service.errors import NotFound
from service.runs.insights import DEFAULT_MAX_POINTS, KernelSource, SourceUnavailable
from service.schemas import ConvergencePublic, ErrorPublic, ImportancePublic, TimelinePublic

router = APIRouter(tags=["insights"])

RunId = Annotated[int, Path(ge=1, le=repo.MAX_DB_INT, description="The run's id.")]
ScheduleId = Annotated[int, Path(ge=1, le=repo.MAX_DB_INT, description="The cache entry's id.")]
_NOT_FOUND = {404: {"model": ErrorPublic, "description": "No such run or schedule, or none yet."}}
_SOURCE = {200: {"content": {"text/plain": {}}}, **_NOT_FOUND}


def _run(session: SessionDep, run_id: int) -> RunModel:
    run = repo.get_run(session, run_id=run_id)
    if run is None:
        raise NotFound(f"run {run_id} not found")
    return run


def _run_schedule(session: SessionDep, insights: InsightsDep, run: RunModel) -> dict[str, Any]:
    schedule = insights.run_schedule(session, run)
    if schedule is None:
        raise NotFound(f"run {run.id} has no best schedule yet")
    return schedule


def _cached(session: SessionDep, schedule_id: int) -> ScheduleModel:
    row = repo.get_schedule(session, schedule_id=schedule_id)
    if row is None:
        raise NotFound(f"schedule {schedule_id} not found")
    return row


def _source_response(
    insights: InsightsDep, session: SessionDep, schedule: dict[str, Any],
    kernel_hash: str | None, device: DeviceModel,
) -> PlainTextResponse:
    try:
        source: KernelSource = insights.source(session, schedule, kernel_hash, device)
    except SourceUnavailable as exc:
        raise NotFound(str(exc)) from exc
    return PlainTextResponse(
        source.text,
        headers={
            "X-Pipetune-Source": source.origin,
            "Content-Disposition": f'inline; filename="{source.filename}"',
        },
    )


@router.get("/runs/{run_id}/convergence", response_model=ConvergencePublic,
            responses=_NOT_FOUND)
def run_convergence(
    session: SessionDep,
    insights: InsightsDep,
    run_id: RunId,
    max_points: Annotated[int, Query(ge=10, le=100_000)] = DEFAULT_MAX_POINTS,
) -> ConvergencePublic:
    """The run's trials (sampled beyond ``max_points``; every improvement kept) with
    seconds since its start, and its best-so-far steps."""
    return insights.convergence(session, _run(session, run_id), max_points)


@router.get("/runs/{run_id}/importance", response_model=ImportancePublic, responses=_NOT_FOUND)
def run_importance(
    db: DatabaseDep, session: SessionDep, insights: InsightsDep, run_id: RunId
) -> ImportancePublic:
    """Importance of each search choice for latency (once enough trials are measured)."""
    return insights.importance(db, session, _run(session, run_id))


@router.get("/runs/{run_id}/timeline", response_model=TimelinePublic, responses=_NOT_FOUND)
def run_timeline(session: SessionDep, insights: InsightsDep, run_id: RunId) -> TimelinePublic:
    """The cost model's per-sEU timeline of the run's best schedule."""
    run = _run(session, run_id)
    return insights.timeline(_run_schedule(session, insights, run), run.device)


@router.get("/runs/{run_id}/source", response_class=PlainTextResponse, responses=_SOURCE)
def run_source(session: SessionDep, insights: InsightsDep, run_id: RunId) -> PlainTextResponse:
    """The CUDA source of the run's best schedule: its stored kernel, or rendered now
    (``X-Pipetune-Source`` says which); 404 while neither exists."""
    run = _run(session, run_id)
    schedule = _run_schedule(session, insights, run)
    return _source_response(insights, session, schedule, run.best_kernel_hash, run.device)


@router.get("/schedules/{schedule_id}/timeline", response_model=TimelinePublic,
            responses=_NOT_FOUND)
def schedule_timeline(
    session: SessionDep, insights: InsightsDep, schedule_id: ScheduleId
) -> TimelinePublic:
    """The cost model's per-sEU timeline of a cached schedule."""
    row = _cached(session, schedule_id)
    return insights.timeline(row.schedule, row.device)


@router.get("/schedules/{schedule_id}/source", response_class=PlainTextResponse,
            responses=_SOURCE)
def schedule_source(
    session: SessionDep, insights: InsightsDep, schedule_id: ScheduleId
) -> PlainTextResponse:
    """The CUDA source of a cached schedule (stored kernel, or rendered now)."""
    row = _cached(session, schedule_id)
    return _source_response(insights, session, row.schedule, row.kernel_hash, row.device)
