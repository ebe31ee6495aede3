"""Server-sent events of a run, read from the database.

The stream polls the run's row and its new trials, so it works for a run executed by any
process sharing the database, and across restarts. Events:

- ``status``: the run's JSON whenever its status changes (the first event too);
- ``progress``: ``{trials_done, invalid, phase, best_latency_us, elapsed_s}`` on change;
- ``trial``: each stored trial, in order (``id:`` is its number, for ``Last-Event-ID``);
- ``end``: the final run JSON; the stream then closes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio

from service.core.db import Database
from service.db import repositories as repo
from service.db.models import RunStatus
from service.schemas import RunPublic, TrialPublic

POLL_S = 0.5
KEEPALIVE_S = 15.0
_TRIALS_PER_POLL = 500


def format_event(event: str, data: Any, event_id: int | None = None) -> str:
    """One SSE message (``data`` as one line of JSON)."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def _snapshot(db: Database, run_id: int, after: int) -> tuple[RunPublic | None, list[TrialPublic]]:
    with repo.session_scope(db.read_sessions) as session:
        run = repo.get_run(session, run_id=run_id)
        if run is None:
            return None, []
        trials, _ = repo.list_trials(session, run_id=run_id, after=after, limit=_TRIALS_PER_POLL)
        return RunPublic.of(run), [TrialPublic.of(t) for t in trials]


async def run_events(
    db: Database,
    run_id: int,
    is_disconnected: Callable[[], Awaitable[bool]],
    poll_s: float = POLL_S,
    after: int = -1,
) -> AsyncIterator[str]:
    """The event stream of run ``run_id`` (see the module docstring); ``trial`` events
    start after trial number ``after``."""
    status: str | None = None
    progress: dict[str, Any] | None = None
    last_trial = after
    quiet_s = 0.0
    yield ": pipetune run events\n\n"
    while True:
        run, trials = await anyio.to_thread.run_sync(_snapshot, db, run_id, last_trial)
        if run is None:
            yield format_event("error", {"detail": f"run {run_id} not found"})
            return
        sent = False
        if run.status != status:
            status = run.status
            yield format_event("status", run.model_dump(mode="json"))
            sent = True
        for trial in trials:
            last_trial = trial.number
            yield format_event("trial", trial.model_dump(mode="json"), trial.number)
            sent = True
        now = {
            "trials_done": run.trials_done,
            "invalid": run.invalid,
            "phase": run.phase,
            "best_latency_us": run.best.latency_us if run.best else None,
            "elapsed_s": round(run.elapsed_s, 3),
        }
        if now != progress:
            progress = now
            yield format_event("progress", now)
            sent = True
        if RunStatus(run.status).is_finished() and len(trials) < _TRIALS_PER_POLL:
            yield format_event("end", run.model_dump(mode="json"))
            return
        if await is_disconnected():
            return
        quiet_s = 0.0 if sent else quiet_s + poll_s
        if quiet_s >= KEEPALIVE_S:
            quiet_s = 0.0
            yield ": keep-alive\n\n"
        await anyio.sleep(poll_s)
