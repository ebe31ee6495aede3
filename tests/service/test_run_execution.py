"""One run's execution apart from the manager's threads: when its search stops, and what a
stop at shutdown leaves behind (the run, to be resumed)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from service_helpers import SMALL_GEMM

import migrations
from scheduler_search.search import Progress
from service.core.config import Settings
from service.core.db import Database
from service.db import repositories as repo
from service.db.models import RunStatus
from service.runs.context import RunContext, RunLease
from service.runs.execution import RunExecution
from service.runs.executors import ExecutorRegistry
from service.runs.manager import RunManager
from service.runs.tune import prepare
from service.schemas import TuneRequest


@dataclass
class Claimed:
    """A queued run claimed by ``manager``, and a context to execute it in."""

    manager: RunManager
    context: RunContext
    lease: RunLease

    @property
    def run_id(self) -> int:
        return self.lease.run_id


@pytest.fixture
def claimed(settings: Settings) -> Iterator[Claimed]:
    db = Database(settings.database_url)
    migrations.upgrade(db.url, engine=db.engine)
    executors = ExecutorRegistry.from_settings(settings)
    manager = RunManager(db, settings, executors)
    request = TuneRequest(op="gemm", params=SMALL_GEMM, device="sim:h200",
                          budget={"trials": 8})
    submitted = manager.submit(prepare(request, settings))
    assert submitted.run is not None
    with repo.session_scope(db.sessions) as session:
        run = repo.claim_run(session, run_id=submitted.run.id, owner=manager.owner)
        assert run is not None
        lease = RunLease(run.id, run.attempts)
    context = RunContext(db, settings, executors, None, manager.owner,
                         shutdown=threading.Event())
    try:
        yield Claimed(manager, context, lease)
    finally:
        executors.close()
        db.engine.dispose()


def _progress() -> Progress:
    return Progress(phase="search", trials_done=0, trials_budget=8, invalid=0,
                    best_latency_us=None, best_schedule_hash=None, elapsed_s=0.0)


def test_should_stop_on_shutdown_or_on_a_cancel_found_in_the_database(claimed: Claimed) -> None:
    cancel = threading.Event()
    execution = RunExecution.load(claimed.context, claimed.lease, cancel=cancel)
    execution.on_progress(_progress())
    assert not execution.should_stop()
    # Another process's DELETE reaches this run at its next progress update.
    with repo.session_scope(claimed.context.db.sessions) as session:
        repo.request_cancel(session, run_id=claimed.run_id)
    execution.on_progress(_progress())
    assert cancel.is_set() and execution.should_stop()

    other = RunExecution.load(claimed.context, claimed.lease, cancel=threading.Event())
    assert not other.should_stop()
    claimed.context.shutdown.set()
    assert other.should_stop()


def test_a_stop_at_shutdown_leaves_the_run_to_resume(claimed: Claimed) -> None:
    claimed.context.shutdown.set()
    RunExecution.load(claimed.context, claimed.lease, cancel=threading.Event()).execute()
    run = claimed.manager.get(claimed.run_id)
    assert run is not None and run.status == RunStatus.RUNNING.value and run.owner is None
    assert claimed.manager.recover() == [claimed.run_id]  # on_restart "resume": queued again
    run = claimed.manager.get(claimed.run_id)
    assert run is not None and run.status == RunStatus.QUEUED.value


def test_a_cancelled_execution_ends_the_run_cancelled(claimed: Claimed) -> None:
    cancel = threading.Event()
    cancel.set()
    RunExecution.load(claimed.context, claimed.lease, cancel=cancel).execute()
    run = claimed.manager.get(claimed.run_id)
    assert run is not None and run.status == RunStatus.CANCELLED.value
    assert run.stop_reason == "cancelled"


def test_a_cancelled_run_whose_process_died_is_done_at_the_next_recovery(
    claimed: Claimed, settings: Settings
) -> None:
    with repo.session_scope(claimed.context.db.sessions) as session:
        run = repo.request_cancel(session, run_id=claimed.run_id)
        assert run is not None and (run.status, run.phase) == ("cancelled", "stopping")
    # The owner never stores the outcome; another manager of this host finds it gone.
    other = RunManager(claimed.context.db, settings, claimed.context.executors)
    assert other.recover() == []  # nothing to resume
    run = other.get(claimed.run_id)
    assert run is not None and (run.status, run.phase, run.owner) == ("cancelled", "done", None)
    assert run.stop_reason == "cancelled"
