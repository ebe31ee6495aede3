"""Server-sent events of a run, read from the database and fanned out.

Each watched run has one :class:`RunFeed`: one poller reads the run's row and its new
trials every ``poll_s`` (so it works for a run executed by any process sharing the
database, and across restarts), formats each event once, and wakes every watcher, in
``WAKE_GROUPS`` groups one pass of the event loop apart (all at once, hundreds of
streams' sends held every other request, a health probe too, behind them). A thousand
watchers of a run cost the database what one does, and the run's own writes never wait
for them. The poller stops when the run ends or its last watcher leaves.
Events:

- ``status``: the run's JSON whenever its status changes (the first event too);
- ``progress``: ``{trials_done, invalid, phase, best_latency_us, elapsed_s}`` on change;
- ``trial``: each stored trial, in order (``id:`` is its number, for ``Last-Event-ID``);
- ``end``: the final run JSON; the stream then closes;
- ``error``: the database failed; the stream then closes (reconnect later).
"""

from __future__ import annotations

import bisect
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup

from service.core.db import Database
from service.db import repositories as repo
from service.db.models import RunStatus
from service.errors import NotFound
from service.schemas import RunPublic, TrialPublic

logger = logging.getLogger(__name__)

POLL_S = 0.5
#: Watchers of a run are woken in this many groups, one per pass of the event loop.
WAKE_GROUPS = 50
KEEPALIVE_S = 15.0
_TRIALS_PER_POLL = 500


class StreamsFull(RuntimeError):
    """The server already holds its most open event streams."""


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


def _read_into(db: Database, feed: RunFeed, after: int) -> list[TrialPublic]:
    """One poll, in a worker thread: the run's snapshot, formatted into ``feed``."""
    run, trials = _snapshot(db, feed.run_id, after)
    feed.update(run, trials)
    return trials


def _progress(run: RunPublic) -> dict[str, Any]:
    return {
        "trials_done": run.trials_done,
        "invalid": run.invalid,
        "phase": run.phase,
        "best_latency_us": run.best.latency_us if run.best else None,
        "elapsed_s": round(run.elapsed_s, 3),
    }


class RunFeed:
    """What the watchers of one run are sent: the latest ``status`` and ``progress``
    events, every ``trial`` event so far, and the closing ``end`` or ``error``."""

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        self.status: str | None = None
        self.progress: str | None = None
        self.numbers: list[int] = []
        self.trials: list[str] = []
        self.last: str | None = None  # the closing event, once there is one
        self.failed = False  # the database failed
        self.loaded = anyio.Event()  # set after the first poll
        self.watchers = 0
        self._status_value: str | None = None
        self._progress_value: dict[str, Any] | None = None
        self._changed = [anyio.Event() for _ in range(WAKE_GROUPS)]
        self._next_group = 0

    def changed(self, group: int) -> anyio.Event:
        """Set when the watchers of ``group`` are woken after the next update (take it
        before reading the feed)."""
        return self._changed[group]

    async def wake(self) -> None:
        """Wake the watchers, a group per pass of the event loop."""
        for group in range(WAKE_GROUPS):
            changed, self._changed[group] = self._changed[group], anyio.Event()
            changed.set()
            await anyio.lowlevel.checkpoint()

    def update(self, run: RunPublic | None, trials: list[TrialPublic]) -> None:
        """Take one poll's snapshot, formatting its events (in the poller's thread: a
        burst of trials formatted on the event loop stalled every stream and request);
        the watchers see it once woken. ``loaded`` is the poller's to set, on the loop."""
        if run is None:
            self.last = format_event("error", {"detail": f"run {self.run_id} not found"})
        else:
            if run.status != self._status_value:
                self._status_value = run.status
                self.status = format_event("status", run.model_dump(mode="json"))
            for trial in trials:
                self.numbers.append(trial.number)
                self.trials.append(format_event("trial", trial.model_dump(mode="json"),
                                                trial.number))
            progress = _progress(run)
            if progress != self._progress_value:
                self._progress_value = progress
                self.progress = format_event("progress", progress)
            if RunStatus(run.status).is_finished() and len(trials) < _TRIALS_PER_POLL:
                self.last = format_event("end", run.model_dump(mode="json"))

    def fail(self, detail: str) -> None:
        self.failed = True
        self.last = format_event("error", {"detail": detail})

    async def watch(self, after: int, keepalive_s: float = KEEPALIVE_S) -> AsyncIterator[str]:
        """One watcher's stream: trial events after number ``after``. What an update
        brings goes out as one chunk: with hundreds of watchers, each message sent costs
        the event loop a pass through every middleware."""
        yield ": pipetune run events\n\n"
        status = progress = None
        index = bisect.bisect_right(self.numbers, after)
        group, self._next_group = self._next_group, (self._next_group + 1) % WAKE_GROUPS
        while True:
            changed = self.changed(group)
            chunk: list[str] = []
            if self.status is not None and self.status is not status:
                status = self.status
                chunk.append(status)
            new = self.trials[index:]  # the poller's thread may be appending: count these
            chunk += new
            index += len(new)
            if self.progress is not None and self.progress is not progress:
                progress = self.progress
                chunk.append(progress)
            if self.last is not None:
                yield "".join([*chunk, self.last])
                return
            if chunk:
                yield "".join(chunk)
            with anyio.move_on_after(keepalive_s) as timer:
                await changed.wait()
            if timer.cancelled_caught:
                yield ": keep-alive\n\n"


class EventHub:
    """The feeds of the watched runs, and the cap on open streams.

    Args:
        db: where runs are read.
        max_streams: open streams allowed (:class:`StreamsFull` beyond).
        poll_s: how often a feed reads its run.
    """

    def __init__(self, db: Database, max_streams: int, poll_s: float = POLL_S) -> None:
        self.db = db
        self.max_streams = max_streams
        self.poll_s = poll_s
        self.open_streams = 0
        self._feeds: dict[int, RunFeed] = {}
        self._tasks: TaskGroup | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[EventHub]:
        """Run the feeds' pollers while inside (the app's lifespan)."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                yield self
            finally:
                self._tasks = None
                tasks.cancel_scope.cancel()

    async def open(self, run_id: int) -> RunFeed:
        """Count a new stream of run ``run_id`` and give its feed (the caller calls
        :meth:`release` when the stream ends). Raises :class:`StreamsFull` or
        :class:`NotFound`."""
        if self.open_streams >= self.max_streams:
            raise StreamsFull(f"{self.max_streams} event streams are open")
        if self._tasks is None:
            raise RuntimeError("the event hub is not running")
        feed = self._feeds.get(run_id)
        if feed is None:
            feed = self._feeds[run_id] = RunFeed(run_id)
            self._tasks.start_soon(self._poll, feed, name=f"pipetune-events-{run_id}")
        feed.watchers += 1
        self.open_streams += 1
        try:
            await feed.loaded.wait()
        except BaseException:  # the client left first
            self.release(feed)
            raise
        if feed.status is None:  # no such run, or the database failed at once
            self.release(feed)
            if feed.failed:
                raise repo.StorageError(f"event stream of run {run_id}: database failed")
            raise NotFound(f"run {run_id} not found")
        return feed

    def release(self, feed: RunFeed) -> None:
        feed.watchers -= 1
        self.open_streams -= 1

    async def _poll(self, feed: RunFeed) -> None:
        after = -1
        try:
            while feed.watchers > 0 and feed.last is None:
                trials = await anyio.to_thread.run_sync(_read_into, self.db, feed, after)
                feed.loaded.set()
                await feed.wake()
                after = trials[-1].number if trials else after
                if len(trials) < _TRIALS_PER_POLL and feed.last is None:
                    await anyio.sleep(self.poll_s)
        except repo.StorageError as exc:
            logger.warning("event stream of run %d: %s", feed.run_id, exc)
            feed.fail("database unavailable; reconnect later")
            feed.loaded.set()
            await feed.wake()
        finally:
            # No await between the last check of the watchers and this: a new watcher
            # either found this feed still polling or starts a new one.
            if self._feeds.get(feed.run_id) is feed:
                del self._feeds[feed.run_id]
