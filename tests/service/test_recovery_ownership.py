"""A worker never re-queues a run it is executing, and a run taken over elsewhere is never
written by the process that lost it (issue 42, item 2).

With ``PIPETUNE_STALE_AFTER_S=2``, 6 of 80 runs were queued again under their running
search: a process took a run of its own that it had claimed but not yet registered as
executing for a dead owner's (``_owner_dead`` read its own pid as a predecessor's), its
heartbeat came every 5 s against a 2 s stale period, and a search whose run had been
taken over kept storing trials and its outcome.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from run_fakes import (
    OTHER_OWNER,
    Gate,
    GatedRegistry,
    finished,
    on_another_host,
    queue_run,
    trial_hashes,
    until,
)
from sqlalchemy import update

from service.core.config import Settings
from service.core.db import Database
from service.db import repositories as repo
from service.db.models import RunModel, RunStatus, utcnow
from service.runs.manager import RunManager


def _age_heartbeat(db: Database, run_id: int, seconds: float = 3600.0) -> None:
    """The run's last heartbeat ``seconds`` ago (as if its owner went silent)."""
    with repo.session_scope(db.sessions) as session:
        session.execute(update(RunModel).where(RunModel.id == run_id).values(
            heartbeat_at=utcnow() - dt.timedelta(seconds=seconds)))


def test_its_own_recovery_never_requeues_a_run_it_claimed(
        settings: Settings, managers: Callable[..., RunManager],
        monkeypatch: pytest.MonkeyPatch) -> None:
    manager = managers(settings)
    real_execute, recovered = manager._claimed.execute, []

    def execute_after_a_recovery(*args: Any, **kwargs: Any) -> None:
        # The recovery thread runs between the claim and the run's registration.
        if not recovered:
            recovered.append(manager.recover())
        real_execute(*args, **kwargs)

    monkeypatch.setattr(manager._claimed, "execute", execute_after_a_recovery)
    manager.start()
    run_id = queue_run(manager, settings, trials=16)
    until(lambda: finished(manager, run_id))
    assert recovered == [[]]
    run = manager.get(run_id)
    assert run is not None and (run.status, run.attempts, run.trials_done) == ("succeeded", 1, 16)
    hashes = trial_hashes(manager, run_id)
    assert len(hashes) == 16 and len(set(hashes)) == 16  # measured once each


def test_a_live_run_manager_of_this_process_keeps_its_runs(
        settings: Settings, managers: Callable[..., RunManager]) -> None:
    gate = Gate()
    executing = managers(settings, GatedRegistry(gate))
    executing.start()
    run_id = queue_run(executing, settings)
    assert gate.entered.wait(30)
    other = managers(settings)  # e.g. a `pipetune tune` in the API's process
    assert other.recover() == []
    run = other.get(run_id)
    assert run is not None and (run.status, run.owner) == ("running", executing.owner)
    gate.open()
    until(lambda: finished(executing, run_id))
    assert executing.get(run_id).status == "succeeded"


def test_heartbeats_come_several_times_a_stale_period_whatever_heartbeat_s_says(
        settings: Settings, managers: Callable[..., RunManager],
        monkeypatch: pytest.MonkeyPatch) -> None:
    quick = settings.model_copy(update={"stale_after_s": 0.6, "heartbeat_s": 5.0})
    gate = Gate()
    executing = managers(quick, GatedRegistry(gate))
    executing.start()
    run_id = queue_run(executing, quick)
    assert gate.entered.wait(30)
    time.sleep(2 * quick.stale_after_s)  # a batch measured for two stale periods
    with on_another_host(monkeypatch):
        assert managers(quick).recover() == []
    gate.open()
    until(lambda: finished(executing, run_id))
    run = executing.get(run_id)
    assert run is not None and (run.status, run.attempts) == ("succeeded", 1)


def test_a_search_whose_run_was_taken_over_stops_without_writing(
        settings: Settings, managers: Callable[..., RunManager], db: Database,
        monkeypatch: pytest.MonkeyPatch) -> None:
    gate = Gate()
    executing = managers(settings, GatedRegistry(gate))
    executing.start()
    run_id = queue_run(executing, settings)
    assert gate.entered.wait(30)

    failing = threading.Event()

    def heartbeat_fails(*args: Any, **kwargs: Any) -> None:
        failing.set()
        raise repo.StorageError("database error: OperationalError: connection lost")

    monkeypatch.setattr(repo, "heartbeat", heartbeat_fails)
    # A heartbeat already under way when the patch landed could still write after the
    # ageing below: age it once the (single) heartbeat thread has failed one.
    assert failing.wait(30)
    _age_heartbeat(db, run_id)  # silent for an hour, as far as anyone can tell
    with on_another_host(monkeypatch):
        assert managers(settings).recover() == [run_id]  # a fair decision elsewhere
    with repo.session_scope(db.sessions) as session:
        taken = repo.claim_next_queued(session, owner=OTHER_OWNER)
        assert taken is not None and (taken.id, taken.attempts) == (run_id, 2)
    gate.open()  # the first search's batch comes back
    until(lambda: executing.active_runs == [])
    run = executing.get(run_id)
    assert run is not None
    assert (run.status, run.owner, run.attempts, run.trials_done) == (
        RunStatus.RUNNING.value, OTHER_OWNER, 2, 0)
    assert trial_hashes(executing, run_id) == []  # nothing stored by the search that lost it


def test_a_requeue_decided_on_a_stale_read_changes_nothing_if_the_owner_beat_meanwhile(
        settings: Settings, managers: Callable[..., RunManager], db: Database) -> None:
    manager = managers(settings)
    run_id = queue_run(manager, settings)
    with repo.session_scope(db.sessions) as session:
        assert repo.claim_run(session, run_id=run_id, owner=OTHER_OWNER) is not None
    _age_heartbeat(db, run_id)
    seen = manager.get(run_id)
    assert seen is not None
    stale_before = repo.stale_before(settings.stale_after_s)
    with repo.session_scope(db.sessions) as session:  # the owner beats after the read
        repo.heartbeat(session, run_ids=[run_id], owner=OTHER_OWNER)
    with repo.session_scope(db.sessions) as session:
        assert not repo.requeue_run(session, run_id=run_id, owner=seen.owner,
                                    attempt=seen.attempts, stale_before=stale_before)
    _age_heartbeat(db, run_id)
    with repo.session_scope(db.sessions) as session:  # queued and claimed again meanwhile
        assert repo.requeue_run(session, run_id=run_id, owner=seen.owner,
                                attempt=seen.attempts, stale_before=stale_before)
        assert repo.claim_run(session, run_id=run_id, owner="elsewhere:1:0000cafe")
    with repo.session_scope(db.sessions) as session:
        assert not repo.requeue_run(session, run_id=run_id, owner=seen.owner,
                                    attempt=seen.attempts)
        assert not repo.interrupt_run(session, run_id=run_id, owner=seen.owner,
                                      attempt=seen.attempts, reason="stale")
    run = manager.get(run_id)
    assert run is not None and (run.status, run.owner, run.attempts) == (
        "running", "elsewhere:1:0000cafe", 2)
