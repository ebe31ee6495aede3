"""Runs survive a storm of database faults (issue 42, item 6).

With connections killed every 0.1 s for 20 s, the search's Optuna writes failed at once
(only pipetune's own were retried) and the run's three starts were spent within seconds;
after a worker was killed, the resumed run's Optuna study lacked the last round's trials
(5-8, while pipetune's tables had them); and a worker wrote on into a deleted SQLite file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
from run_fakes import (
    OTHER_OWNER,
    Gate,
    GatedRegistry,
    finished,
    migrated,
    queue_run,
    run_managers,
    until,
)
from service_helpers import service_settings
from sqlalchemy import Engine, event, inspect, text
from sqlalchemy.exc import OperationalError

import migrations
from service.core.config import Settings
from service.core.db import Database
from service.db import repositories as repo
from service.runs.execution import RunExecution
from service.runs.manager import RunManager

#: Retries that ride out a few failed statements in well under a second.
_FAST_RETRIES = {"db_retry_attempts": 6, "db_retry_max_wait_s": 0.05}


class _Storm:
    """The next ``count`` writes on ``engine`` fail as a killed connection does."""

    def __init__(self, engine: Engine, count: int) -> None:
        self.left = count
        event.listen(engine, "before_cursor_execute", self._fail)

    def _fail(self, _conn: Any, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if self.left > 0 and statement.lstrip().upper().startswith(("INSERT", "UPDATE")):
            self.left -= 1
            raise OperationalError(statement, params,
                                   Exception("server closed the connection unexpectedly"))


def _study_trials(db: Database, run_id: int) -> list[dict[str, Any]]:
    """The params of the measured trials in the run's Optuna study (what it mirrors)."""
    study = optuna.load_study(study_name=f"pipetune-run-{run_id}",
                              storage=db.optuna_storage())
    measured = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
    return [t.params for t in study.get_trials(deepcopy=False)
            if t.state in measured and not t.user_attrs.get("duplicate")]


def _stored_choices(db: Database, run_id: int) -> list[dict[str, Any]]:
    with repo.session_scope(db.sessions) as session:
        rows, _ = repo.list_trials(session, run_id=run_id)
        return [t.choices for t in rows]


def _same(first: list[dict[str, Any]], second: list[dict[str, Any]]) -> bool:
    def key(params: dict[str, Any]) -> str:
        return repr(sorted(params.items()))

    return sorted(map(key, first)) == sorted(map(key, second))


def test_the_studys_writes_are_retried_through_a_storm(
        settings: Settings, db: Database, managers: Callable[..., RunManager]) -> None:
    one_start = settings.model_copy(update={**_FAST_RETRIES, "max_run_attempts": 1})
    storm = _Storm(db.optuna_storage().engine, count=4)
    manager = managers(one_start)
    manager.start()
    run_id = queue_run(manager, one_start, trials=16)
    until(lambda: finished(manager, run_id))
    run = manager.get(run_id)
    assert run is not None and (run.status, run.attempts, run.error) == ("succeeded", 1, None)
    assert storm.left == 0  # every planned fault happened
    assert _same(_study_trials(db, run_id), _stored_choices(db, run_id))


def test_a_requeued_run_waits_longer_before_each_restart(
        settings: Settings, managers: Callable[..., RunManager],
        monkeypatch: pytest.MonkeyPatch) -> None:
    slow = settings.model_copy(update={"db_retry_attempts": 2, "db_retry_max_wait_s": 0.3,
                                       "max_run_attempts": 3})
    events: list[tuple[str, float]] = []
    real_requeue, real_claim = repo.requeue_run, repo.claim_next_queued

    def add_trials(*args: Any, **kwargs: Any) -> None:
        raise repo.StorageError("database error: OperationalError: the server is gone")

    def requeue_run(*args: Any, **kwargs: Any) -> Any:
        done = real_requeue(*args, **kwargs)
        events.append(("requeued", time.monotonic()))
        return done

    def claim_next_queued(*args: Any, **kwargs: Any) -> Any:
        run = real_claim(*args, **kwargs)
        if run is not None:
            events.append(("claimed", time.monotonic()))
        return run

    monkeypatch.setattr(repo, "add_trials", add_trials)
    monkeypatch.setattr(repo, "requeue_run", requeue_run)
    monkeypatch.setattr(repo, "claim_next_queued", claim_next_queued)
    manager = managers(slow)
    manager.start()
    run_id = queue_run(manager, slow, trials=16)
    until(lambda: finished(manager, run_id))
    run = manager.get(run_id)
    assert run is not None and (run.status, run.attempts) == ("failed", 3)
    assert [name for name, _ in events] == ["claimed", "requeued"] * 2 + ["claimed"]
    waits = [events[i + 1][1] - events[i][1] for i in (1, 3)]
    assert waits[0] >= 0.3 and waits[1] >= 0.6  # db_retry_max_wait_s, doubling


class _Killed(BaseException):
    """The worker's process dies here (no handler of the run's sees it)."""


def test_a_resumed_runs_study_holds_every_stored_trial_after_a_kill(
        settings: Settings, db: Database, managers: Callable[..., RunManager],
        monkeypatch: pytest.MonkeyPatch) -> None:
    killed = managers(settings)
    run_id = queue_run(killed, settings, trials=24)
    real_on_trials = RunExecution.on_trials

    def on_trials_then_die(self: RunExecution, records: list) -> None:
        real_on_trials(self, records)
        if len(_stored_choices(db, run_id)) >= 16:  # the second round is stored
            raise _Killed

    monkeypatch.setattr(RunExecution, "on_trials", on_trials_then_die)
    with pytest.raises(_Killed):
        killed.run_inline(run_id)
    killed.close()
    monkeypatch.undo()
    assert len(_study_trials(db, run_id)) < len(_stored_choices(db, run_id))
    successor = managers(settings)
    assert successor.recover() == [run_id]
    run = successor.run_inline(run_id)
    assert run is not None and (run.status, run.trials_done) == ("succeeded", 24)
    stored = _stored_choices(db, run_id)
    assert len(stored) == 24 and _same(_study_trials(db, run_id), stored)


def _record_calls(monkeypatch: pytest.MonkeyPatch, names: tuple[str, ...]) -> list[str]:
    """From now on, the names of these repository functions as they are called."""
    calls: list[str] = []

    def recording(name: str) -> Callable[..., Any]:
        real = getattr(repo, name)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return real(*args, **kwargs)

        return recorded

    for name in names:
        monkeypatch.setattr(repo, name, recording(name))
    return calls


def test_a_run_manager_whose_sqlite_file_is_deleted_stops_without_writing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "pipetune.db"
    settings = service_settings(f"sqlite:///{path}", tmp_path).model_copy(
        update={"max_concurrent_runs": 1})
    gate = Gate()
    with migrated(settings.database_url) as db, run_managers(db) as managers:
        manager = managers(settings, GatedRegistry(gate))
        queue_run(manager, settings)
        queue_run(manager, settings, params={"m": 2048, "n": 1024, "k": 1024,
                                             "dtype": "float16"})
        manager.start()
        assert gate.entered.wait(30)
        calls = _record_calls(monkeypatch, ("add_trials", "update_progress",
                                            "claim_next_queued", "finish_run"))
        path.unlink()
        gate.open()
        until(lambda: manager.stopped_because is not None and manager.active_runs == [])
        assert "deleted" in manager.stopped_because
        assert calls == []  # no trial, progress, end or claim went to the ghost file
        assert gate.batches == 1


def test_a_worker_whose_sqlite_file_is_deleted_exits_saying_why(tmp_path: Path) -> None:
    path = tmp_path / "pipetune.db"
    settings = service_settings(f"sqlite:///{path}", tmp_path)
    with migrated(settings.database_url) as db, run_managers(db) as managers:
        reader = managers(settings)
        run_id = queue_run(reader, settings, trials=5000)
        env = {**os.environ, "PIPETUNE_DATA_DIR": str(tmp_path), "PIPETUNE_HEARTBEAT_S": "0.2"}
        worker = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "worker", "--database-url",
             settings.database_url, "--log-level", "warning"],
            env=env, stderr=subprocess.PIPE, text=True)
        try:
            until(lambda: reader.get(run_id).trials_done > 0)
            path.unlink()
            assert worker.wait(20) == 1
        finally:
            worker.kill()
            stderr = worker.communicate()[1]
        assert "database file was deleted" in stderr


def test_0009_adds_not_before_and_its_downgrade_keeps_the_runs(
        settings: Settings, db: Database, managers: Callable[..., RunManager]) -> None:
    manager = managers(settings)
    run_id = queue_run(manager, settings)
    migrations.downgrade(db.url, "0008", engine=db.engine)
    with db.engine.connect() as connection:
        assert "not_before" not in {c["name"] for c in inspect(connection).get_columns(
            "pipetune_runs")}
        assert connection.execute(text("select status from pipetune_runs")).scalar() == "queued"
    migrations.upgrade(db.url, engine=db.engine)
    with repo.session_scope(db.sessions) as session:  # a run from before waits for nothing
        claimed = repo.claim_next_queued(session, owner=OTHER_OWNER)
        assert claimed is not None and claimed.id == run_id and claimed.not_before is None
