"""Runs: list, one, its trials, its live events (SSE), cancel, resume."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Body, Header, HTTPException, Path, Query
from fastapi.responses import StreamingResponse

from service.api.auth import TunerDep, check_can_manage
from service.api.deps import EventHubDep, RunManagerDep, SessionDep, SettingsDep
from service.api.sse import EventStreamResponse
from service.core.config import Settings
from service.db import processes
from service.db import repositories as repo
from service.db.models import RunStatus
from service.errors import InvalidRequest, NotFound
from service.runs.events import StreamsFull
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

MAX_DB_INT = repo.MAX_DB_INT
RunId = Annotated[int, Path(ge=1, le=MAX_DB_INT, description="The run's id.")]
TrialOrder = Literal["number", "-number", "latency_us", "-latency_us", "status", "-status"]
Limit = Annotated[int, Query(ge=1, le=10_000)]
Offset = Annotated[int, Query(ge=0, le=MAX_DB_INT)]
_NOT_FOUND = {404: {"model": ErrorPublic, "description": "No such run."}}


def _served(session: SessionDep, settings: Settings) -> set[str]:
    """The device keys live processes serve (a queued run of another device waits)."""
    return processes.served_keys(session, stale_after_s=settings.stale_after_s)


def _run_or_404(session: SessionDep, run_id: int, settings: Settings | None = None) -> RunPublic:
    """The run; with ``settings``, a queued one says what it waits for."""
    run = repo.get_run(session, run_id=run_id)
    if run is None:
        raise NotFound(f"run {run_id} not found")
    check = settings is not None and run.status == RunStatus.QUEUED.value
    return RunPublic.of(run, _served(session, settings) if check else None)


@router.get("", response_model=RunsPublic)
def list_runs(
    session: SessionDep,
    settings: SettingsDep,
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
    queued = any(r.status == RunStatus.QUEUED.value for r in rows)
    served = _served(session, settings) if queued else None
    return RunsPublic(data=[RunPublic.of(r, served) for r in rows], count=count)


@router.get("/{run_id}", response_model=RunPublic, responses=_NOT_FOUND)
def get_run(session: SessionDep, settings: SettingsDep, run_id: RunId) -> RunPublic:
    """One run: status, progress, best so far (a queued one: what it waits for)."""
    return _run_or_404(session, run_id, settings)


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
        429: {"model": ErrorPublic, "description": "Too many open event streams."},
    },
)
async def run_events_stream(
    hub: EventHubDep,
    run_id: RunId,
    after: Annotated[
        int | None, Query(ge=-1, le=MAX_DB_INT, description="Send trials after this number "
                          "only.")
    ] = None,
    last_event_id: Annotated[str | None, Header(max_length=32, description="A trial's "
                                                "number (an `EventSource` reconnecting).")
                             ] = None,
) -> StreamingResponse:
    """Server-sent events while the run runs: ``status``, ``progress``, ``trial`` (each
    new trial), and ``end`` with the final run; the stream closes after ``end``.

    A client that already has the trials up to N passes ``after=N``; a reconnecting
    ``EventSource`` sends ``Last-Event-ID`` (a trial's number), which counts the same.
    All watchers of a run share one reader of the database; past the server's limit of
    open streams the answer is 429."""
    if after is None and last_event_id is not None:
        after = _event_id(last_event_id)
    try:
        feed = await hub.open(run_id)
    except StreamsFull as exc:
        raise HTTPException(429, f"{exc}; try again later",
                            headers={"Retry-After": "5"}) from exc
    return EventStreamResponse(feed.watch(-1 if after is None else after),
                               release=lambda: hub.release(feed))


def _event_id(text: str) -> int:
    """A ``Last-Event-ID``: a trial number, else a 422 naming the header."""
    value = text.strip()
    if not value.isascii() or not value.isdigit() or int(value) > MAX_DB_INT:
        raise InvalidRequest([{"loc": ("last-event-id",), "type": "int_parsing",
                               "msg": f"must be a trial number from 0 to {MAX_DB_INT}"}],
                             where="header")
    return int(value)


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
