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

Pools are sized by the caller (the API sizes them from its thread limit, so that a thread
never waits for a connection); a checkout that still waits gives up after
``POOL_TIMEOUT_S`` with a 503 instead of hanging. A SQLite file is remembered by its
inode: :meth:`Database.problem` notices it deleted or replaced (a pooled connection would
keep writing to the unlinked file, a new one would start an empty database).
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
POOL_TIMEOUT_S = 10.0
PG_CONNECT_TIMEOUT_S = 5


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


def engine_options(url: str, pool_size: int | None = None) -> dict[str, Any]:
    """``create_engine`` keyword arguments for ``url`` (shared with Optuna's storage);
    ``pool_size`` connections kept (default 10), as many again on a burst."""
    size = pool_size or 10
    pool = {"pool_size": size, "max_overflow": size, "pool_timeout": POOL_TIMEOUT_S}
    if url.startswith("sqlite"):
        connect = {"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False}
        return {"connect_args": connect, **pool}
    return {"pool_pre_ping": True, "connect_args": {"connect_timeout": PG_CONNECT_TIMEOUT_S},
            **pool}


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL, or None (another backend, or in memory)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database).expanduser()


def make_engine(url: str, *, read_only: bool = False, pool_size: int | None = None) -> Engine:
    """An engine for ``url``; creates the SQLite file's folder if needed.

    ``read_only`` engines of SQLite begin deferred transactions: a reader holds a WAL
    snapshot and never the write lock, however long it stays open (an event stream).
    """
    parsed = make_url(url)
    path = sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, **engine_options(url, pool_size))
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
        pool_size: connections each engine keeps (default 10; the API passes its thread
            limit plus the run threads).
    """

    def __init__(self, url: str, pool_size: int | None = None) -> None:
        self.url = url
        self.engine = make_engine(url, pool_size=pool_size)
        self.read_engine = (
            make_engine(url, read_only=True, pool_size=pool_size)
            if self.engine.dialect.name == "sqlite" else self.engine
        )
        self._sqlite_file = sqlite_path(url)
        self._sqlite_identity: tuple[int, int] | None = None
        self.sessions: sessionmaker[Session] = sessionmaker(self.engine, expire_on_commit=False)
        self.read_sessions: sessionmaker[Session] = sessionmaker(
            self.read_engine, expire_on_commit=False
        )
        self._optuna_storage: optuna.storages.BaseStorage | None = None
        self._lock = threading.Lock()

    @property
    def backend(self) -> str:
        return self.engine.dialect.name

    def remember_file(self) -> None:
        """Note the SQLite file's identity (after the migration created it)."""
        if self._sqlite_file is not None:
            stat = self._sqlite_file.stat()
            self._sqlite_identity = (stat.st_dev, stat.st_ino)

    def problem(self) -> str | None:
        """Why the SQLite file can no longer be used (deleted, replaced), or None; a stat,
        cheap enough for every write request. PostgreSQL: always None (a query tells)."""
        if self._sqlite_file is None or self._sqlite_identity is None:
            return None
        try:
            stat = self._sqlite_file.stat()
        except OSError:
            return "the database file was deleted"
        if (stat.st_dev, stat.st_ino) != self._sqlite_identity:
            return "the database file was replaced"
        return None

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
