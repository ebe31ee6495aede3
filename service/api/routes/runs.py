"""Runs: list, one, its trials, its live events (SSE), cancel, resume."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Body, Header, HTTPException, Path, Query, Request
from fastapi.responses import StreamingResponse

from service.api.auth import TunerDep, check_can_manage
from service.api.deps import DatabaseDep, RunManagerDep, SessionDep
from service.db import repositories as repo
from service.db.models import RunStatus
from service.errors import NotFound
from service.runs.events import run_events
from service.schemas import (
    AUTH_RESPONSES,
    ErrorPublic,
    ResumeRequest,
    RunPublic,
    RunsPublic,
    TrialPublic,
    TrialsPublic,
)

router = APIRouter(prefix="/runs", tags=["runs"])

RunId = Annotated[int, Path(ge=1, le=2**62, description="The run's id.")]
TrialOrder = Literal["number", "-number", "latency_us", "-latency_us", "status", "-status"]
Limit = Annotated[int, Query(ge=1, le=10_000)]
Offset = Annotated[int, Query(ge=0)]
_NOT_FOUND = {404: {"model": ErrorPublic, "description": "No such run."}}


def _run_or_404(session: SessionDep, run_id: int) -> RunPublic:
    run = repo.get_run(session, run_id=run_id)
    if run is None:
        raise NotFound(f"run {run_id} not found")
    return RunPublic.of(run)


@router.get("", response_model=RunsPublic)
def list_runs(
    session: SessionDep,
    status: RunStatus | None = None,
    op: Annotated[str | None, Query(max_length=64)] = None,
    device: Annotated[str | None, Query(max_length=64, description="Name or key.")] = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> RunsPublic:
    """Runs, newest first; filter by status, operator and device."""
    rows, count = repo.list_runs(
        session, status=status.value if status else None, op=op, device=device, limit=limit,
        offset=offset,
    )
    return RunsPublic(data=[RunPublic.of(r) for r in rows], count=count)


@router.get("/{run_id}", response_model=RunPublic, responses=_NOT_FOUND)
def get_run(session: SessionDep, run_id: RunId) -> RunPublic:
    """One run: status, progress, best so far."""
    return _run_or_404(session, run_id)


@router.get("/{run_id}/trials", response_model=TrialsPublic, responses=_NOT_FOUND)
def list_trials(
    session: SessionDep,
    run_id: RunId,
    status: Annotated[str | None, Query(max_length=32)] = None,
    order: Annotated[
        TrialOrder,
        Query(description="Sort key; `-` for descending. Unmeasured trials sort last."),
    ] = "number",
    limit: Limit = 1000,
    offset: Offset = 0,
) -> TrialsPublic:
    """The run's trials (in trial order by default): choices, schedule hash, status,
    latency, error."""
    _run_or_404(session, run_id)
    rows, count = repo.list_trials(
        session, run_id=run_id, status=status, order=order, limit=limit, offset=offset
    )
    return TrialsPublic(data=[TrialPublic.of(t) for t in rows], count=count)


@router.get(
    "/{run_id}/events",
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "Server-sent events."},
        **_NOT_FOUND,
    },
)
def run_events_stream(
    request: Request,
    db: DatabaseDep,
    run_id: RunId,
    after: Annotated[
        int | None, Query(ge=-1, le=2**31, description="Send trials after this number only.")
    ] = None,
    last_event_id: Annotated[str | None, Header(max_length=32)] = None,
) -> StreamingResponse:
    """Server-sent events while the run runs: ``status``, ``progress``, ``trial`` (each
    new trial), and ``end`` with the final run; the stream closes after ``end``.

    A client that already has the trials up to N passes ``after=N``; a reconnecting
    ``EventSource`` sends ``Last-Event-ID`` (a trial's number), which counts the same."""
    if after is None and last_event_id is not None and last_event_id.strip().isdigit():
        after = int(last_event_id.strip())
    # A session of its own, closed before streaming (a SessionDep stays open as long as
    # the stream).
    with repo.session_scope(db.read_sessions) as session:
        _run_or_404(session, run_id)
    return StreamingResponse(
        run_events(db, run_id, request.is_disconnected, after=-1 if after is None else after),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.delete(
    "/{run_id}",
    response_model=RunPublic,
    responses={**_NOT_FOUND, **AUTH_RESPONSES,
               409: {"model": ErrorPublic, "description": "Already finished."}},
)
def cancel_run(
    session: SessionDep, manager: RunManagerDep, run_id: RunId, principal: TunerDep
) -> RunPublic:
    """Cancel a queued run at once, a running one at its next round (trials are kept);
    only the key that made it, or an admin key, may."""
    current = _run_or_404(session, run_id)
    check_can_manage(principal, run_id, current.key_id)
    if RunStatus(current.status).is_finished():
        raise HTTPException(409, f"run {run_id} already {current.status}")
    run = manager.cancel(run_id)
    if run is None:
        raise NotFound(f"run {run_id} not found")
    return RunPublic.of(run)


@router.post(
    "/{run_id}/resume",
    status_code=202,
    response_model=RunPublic,
    responses={**_NOT_FOUND, **AUTH_RESPONSES,
               409: {"model": ErrorPublic, "description": "Not failed, cancelled or "
                     "interrupted, still storing its outcome, or its workload has another "
                     "active run."}},
)
def resume_run(
    session: SessionDep, manager: RunManagerDep, run_id: RunId, principal: TunerDep,
    request: Annotated[ResumeRequest | None, Body()] = None,
) -> RunPublic:
    """Queue a failed, cancelled or interrupted run again: it continues from its stored
    trials (none is measured again); ``budget`` is more than it has done (default: its
    own budget). Only the key that made it, or an admin key, may."""
    current = _run_or_404(session, run_id)
    check_can_manage(principal, run_id, current.key_id)
    budget = request.budget if request is not None and request.budget is not None else None
    run = manager.resume(run_id, trials=budget.trials if budget else None,
                         seconds=budget.seconds if budget else None)
    return RunPublic.of(run)
