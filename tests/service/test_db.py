"""Migrations and repositories, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

import migrations
from service.core.db import Database
from service.db import repositories as repo
from service.db.models import SCHEMA_VERSION, Base, RunModel, RunStatus


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    database = Database(database_url)
    migrations.upgrade(database.url, engine=database.engine)
    yield database
    database.dispose()


def test_upgrade_creates_the_models_tables(db: Database) -> None:
    assert migrations.current(db.url, engine=db.engine) == migrations.head() == SCHEMA_VERSION
    with db.engine.connect() as connection:
        context = MigrationContext.configure(
            connection, opts={"include_object": migrations.include_object, "compare_type": True}
        )
        assert compare_metadata(context, Base.metadata) == []
    migrations.upgrade(db.url, engine=db.engine)  # idempotent
    tables = set(inspect(db.engine).get_table_names())
    assert {t.name for t in Base.metadata.sorted_tables} <= tables
    assert migrations.VERSION_TABLE in tables


def test_optuna_storage_shares_the_database(db: Database) -> None:
    import optuna

    optuna.create_study(storage=db.optuna_storage(), study_name="shared")
    tables = set(inspect(db.engine).get_table_names())
    assert {"studies", "trials", "alembic_version", "pipetune_trials"} <= tables
    assert migrations.current(db.url, engine=db.engine) == SCHEMA_VERSION


def _workload_and_device(session):
    workload = repo.get_or_create_workload(session, key="w" * 64, op="gemm", params={"m": 1})
    device = repo.get_or_create_device(
        session, key="d" * 64, name="sim:h200", kind="simulated", simulated=True, identity={}
    )
    return workload, device


def test_get_or_create_and_one_active_run(db: Database) -> None:
    with repo.session_scope(db.sessions) as session:
        workload, device = _workload_and_device(session)
        again, _ = _workload_and_device(session)
        assert again.id == workload.id
        first, created = repo.create_run(session, workload=workload, device=device,
                                         budget_trials=8, budget_seconds=None, patience=None,
                                         seed=0)
        second, created_again = repo.create_run(session, workload=workload, device=device,
                                                budget_trials=99, budget_seconds=None,
                                                patience=None, seed=0)
        assert created and not created_again and second.id == first.id
        assert first.study_name == f"pipetune-run-{first.id}"
    # The partial unique index refuses a second active run even past the repository.
    with pytest.raises(repo.StorageError), repo.session_scope(db.sessions) as session:
        session.add(RunModel(workload_id=workload.id, device_id=device.id, status="running",
                             budget_trials=1, seed=0, study_name="x", trials_done=0, invalid=0,
                             phase="x", cancel_requested=False, attempts=0, elapsed_s=0.0))
    with repo.session_scope(db.sessions) as session:  # finished runs do not count
        repo.finish_run(session, run_id=first.id, status=RunStatus.FAILED, error="x")
    with repo.session_scope(db.sessions) as session:
        third, created = repo.create_run(session, workload=workload, device=device,
                                         budget_trials=8, budget_seconds=None, patience=None,
                                         seed=0)
        assert created and third.id != first.id


def test_claim_is_won_once_and_trials_are_numbered(db: Database) -> None:
    with repo.session_scope(db.sessions) as session:
        workload, device = _workload_and_device(session)
        run, _ = repo.create_run(session, workload=workload, device=device, budget_trials=8,
                                 budget_seconds=None, patience=None, seed=0)
    with repo.session_scope(db.sessions) as session:
        claimed = repo.claim_next_queued(session, owner="a")
        assert claimed is not None and claimed.id == run.id and claimed.status == "running"
        assert repo.claim_run(session, run_id=run.id, owner="b") is None
        assert repo.claim_next_queued(session, owner="b") is None
    trial = {"status": "ok", "source": "search", "schedule_hash": "h" * 64, "choices": {},
             "latency_us": 1.0, "predicted_us": 1.0, "simulated": True, "error": None,
             "measurement": None}
    with repo.session_scope(db.sessions) as session:
        repo.add_trials(session, run_id=run.id, trials=[trial, trial])
    with repo.session_scope(db.sessions) as session:
        repo.add_trials(session, run_id=run.id, trials=[trial])
        rows, count = repo.list_trials(session, run_id=run.id)
        assert count == 3 and [r.number for r in rows] == [0, 1, 2]
        assert repo.list_trials(session, run_id=run.id, after=0)[1] == 2


def test_best_schedule_keeps_the_faster(db: Database) -> None:
    with repo.session_scope(db.sessions) as session:
        workload, device = _workload_and_device(session)
        run, _ = repo.create_run(session, workload=workload, device=device, budget_trials=8,
                                 budget_seconds=None, patience=None, seed=0)

    def store(latency: float, digest: str, simulated: bool = True) -> float:
        with repo.session_scope(db.sessions) as session:
            row = repo.store_best_schedule(
                session, workload_id=workload.id, device_id=device.id, run_id=run.id,
                schedule_hash=digest * 64, schedule={}, choices={}, latency_us=latency,
                predicted_us=None, simulated=simulated,
            )
            return row.latency_us

    assert store(10.0, "a") == 10.0
    assert store(12.0, "b") == 10.0  # slower: kept the old one
    assert store(8.0, "c") == 8.0
    assert store(20.0, "d", simulated=False) == 20.0  # a GPU timing beats a simulated one
    assert store(1.0, "e", simulated=True) == 20.0
    with repo.session_scope(db.sessions) as session:
        rows = repo.list_schedules(session, op="gemm", device="sim:h200")
        assert [r.schedule_hash for r in rows] == ["d" * 64]


def _reflected(connection, name: str):
    from sqlalchemy import MetaData, Table

    return Table(name, MetaData(), autoload_with=connection)


def test_0003_adds_the_runs_peer_latencies_and_downgrades_keeping_the_rows(
    database_url: str,
) -> None:
    """A database at 0002 with a run and its trial: 0003 adds ``peer_latencies_us`` (NULL
    on the old run, JSONB on PostgreSQL), the run takes a peers dict, and the downgrade
    drops the column without touching the rows (on SQLite, with the service's foreign
    keys on, copying the table would cascade to the trials)."""
    import datetime as dt

    from sqlalchemy.dialects.postgresql import JSONB

    from service.db import results as results_repo

    database = Database(database_url)
    try:
        migrations.upgrade(database.url, "0002", engine=database.engine)
        assert migrations.current(database.url, engine=database.engine) == "0002"
        now = dt.datetime.now(dt.UTC)
        with database.engine.begin() as connection:
            connection.execute(_reflected(connection, "pipetune_workloads").insert(), [
                {"id": 1, "key": "w" * 64, "op": "attention", "params": {}, "created_at": now}])
            connection.execute(_reflected(connection, "pipetune_devices").insert(), [
                {"id": 1, "key": "d" * 64, "name": "cuda:0", "kind": "cuda", "simulated": False,
                 "identity": {}, "created_at": now}])
            connection.execute(_reflected(connection, "pipetune_runs").insert(), [
                {"id": 1, "workload_id": 1, "device_id": 1, "status": "succeeded",
                 "budget_trials": 8, "seed": 0, "study_name": "s", "trials_done": 1,
                 "invalid": 0, "phase": "done", "cancel_requested": False, "attempts": 1,
                 "elapsed_s": 1.0, "created_at": now, "baseline": "sdpa_cudnn",
                 "baseline_latency_us": 300.0}])
            connection.execute(_reflected(connection, "pipetune_trials").insert(), [
                {"run_id": 1, "number": 0, "status": "ok", "source": "search", "choices": {},
                 "simulated": False, "created_at": now}])

        migrations.upgrade(database.url, engine=database.engine)  # 0003 and later ones
        assert migrations.current(database.url, engine=database.engine) == SCHEMA_VERSION
        with database.engine.connect() as connection:
            columns = {c["name"]: c for c in inspect(connection).get_columns("pipetune_runs")}
            column = columns["peer_latencies_us"]
            assert column["nullable"]
            if database.backend == "postgresql":
                assert isinstance(column["type"], JSONB)
        with repo.session_scope(database.sessions) as session:
            run = repo.get_run(session, run_id=1)
            assert run is not None and run.baseline == "sdpa_cudnn"
            assert run.peer_latencies_us is None
            results_repo.set_run_peers(session, run_id=1, latencies_us={"sdpa_flash": 250.5})
        with repo.session_scope(database.sessions) as session:
            assert repo.get_run(session, run_id=1).peer_latencies_us == {"sdpa_flash": 250.5}

        migrations.downgrade(database.url, "0002", engine=database.engine)
        assert migrations.current(database.url, engine=database.engine) == "0002"
        with database.engine.connect() as connection:
            columns = {c["name"] for c in inspect(connection).get_columns("pipetune_runs")}
            assert "peer_latencies_us" not in columns and "baseline" in columns
            runs = _reflected(connection, "pipetune_runs")
            assert connection.execute(runs.select()).one().baseline_latency_us == 300.0
            trials = _reflected(connection, "pipetune_trials")
            assert len(connection.execute(trials.select()).all()) == 1  # not cascaded away
        migrations.upgrade(database.url, engine=database.engine)  # and up again
        assert migrations.current(database.url, engine=database.engine) == SCHEMA_VERSION
    finally:
        database.dispose()
