"""The database: one engine per process (per app), its sessions, and Optuna's storage.

SQLite gets WAL journaling (readers do not block the writer: the API answers while a run
writes trials), a busy timeout instead of immediate "database is locked" errors, foreign
keys on, and ``synchronous=NORMAL`` (safe with WAL; a commit no longer waits for fsync).
Transactions start with ``BEGIN IMMEDIATE``, taking the write lock up front: a deferred
transaction that reads and then writes fails at once with SQLITE_BUSY (no busy-timeout
wait) when another connection committed in between, and Python's sqlite3 module would
otherwise issue its own BEGIN and break SAVEPOINTs (SQLAlchemy's pysqlite notes give
this recipe).
PostgreSQL needs nothing special. Tables come from Alembic (``migrations``), never from
``create_all``.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

if TYPE_CHECKING:
    import optuna

SQLITE_BUSY_TIMEOUT_S = 30.0


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # we emit BEGIN ourselves (see _sqlite_begin)
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _sqlite_begin_immediate(connection: Any) -> None:
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def _sqlite_begin_deferred(connection: Any) -> None:
    connection.exec_driver_sql("BEGIN")


def tune_sqlite(engine: Engine, *, immediate: bool = True) -> None:
    """Install the pragmas and the explicit BEGIN on a SQLite engine."""
    event.listen(engine, "connect", _sqlite_pragmas)
    begin = _sqlite_begin_immediate if immediate else _sqlite_begin_deferred
    event.listen(engine, "begin", begin)


def engine_options(url: str) -> dict[str, Any]:
    """``create_engine`` keyword arguments for ``url`` (shared with Optuna's storage)."""
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False}}
    return {"pool_pre_ping": True, "pool_size": 10, "max_overflow": 20}


def make_engine(url: str, *, read_only: bool = False) -> Engine:
    """An engine for ``url``; creates the SQLite file's folder if needed.

    ``read_only`` engines of SQLite begin deferred transactions: a reader holds a WAL
    snapshot and never the write lock, however long it stays open (an event stream).
    """
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, **engine_options(url))
    if parsed.get_backend_name() == "sqlite":
        tune_sqlite(engine, immediate=not read_only)
    return engine


class Database:
    """The engines, their session factories, and the Optuna storage, created once.

    ``sessions`` are for anything that writes; ``read_sessions`` for the API's reads (on
    SQLite a separate engine whose transactions never take the write lock; on PostgreSQL
    the same engine).

    Args:
        url: SQLAlchemy URL (``sqlite:///...`` or ``postgresql+psycopg://...``).
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.read_engine = (
            make_engine(url, read_only=True) if self.engine.dialect.name == "sqlite"
            else self.engine
        )
        self.sessions: sessionmaker[Session] = sessionmaker(self.engine, expire_on_commit=False)
        self.read_sessions: sessionmaker[Session] = sessionmaker(
            self.read_engine, expire_on_commit=False
        )
        self._optuna_storage: optuna.storages.BaseStorage | None = None
        self._lock = threading.Lock()

    @property
    def backend(self) -> str:
        return self.engine.dialect.name

    def optuna_storage(self) -> optuna.storages.BaseStorage:
        """Optuna's RDB storage in the same database (its own tables, created by Optuna)."""
        with self._lock:
            if self._optuna_storage is None:
                import optuna

                storage = optuna.storages.RDBStorage(
                    self.url, engine_kwargs=engine_options(self.url)
                )
                if self.backend == "sqlite":
                    tune_sqlite(storage.engine)
                    storage.engine.dispose()  # reconnect with the pragmas
                self._optuna_storage = storage
            return self._optuna_storage

    def dispose(self) -> None:
        with self._lock:
            if self._optuna_storage is not None:
                engine = getattr(self._optuna_storage, "engine", None)
                if engine is not None:
                    engine.dispose()
                self._optuna_storage = None
        self.engine.dispose()
        if self.read_engine is not self.engine:
            self.read_engine.dispose()
