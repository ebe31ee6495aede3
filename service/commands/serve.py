"""``pipetune serve [--host] [--port] [--database-url] [--workers N]``: the API server
(uvicorn), and the ``pipetune worker`` processes that run its searches.

Says on start where its database is and where the dashboard answers. The database is
migrated on start; runs left by a dead server are resumed (or marked interrupted with
``PIPETUNE_ON_RESTART=interrupt``), each logged. Bound to an address other than loopback,
every request needs an API key (``pipetune keys create``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from service.core.config import Settings
    from service.runs.worker_processes import WorkerProcesses


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="run the API server", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument(
        "--database-url", default=None, help="SQLAlchemy URL (default: PIPETUNE_DATABASE_URL, "
        "else a SQLite file in the user's data directory); a password here shows in ps"
    )
    parser.add_argument(
        "--database-url-file", default=None, type=Path,
        help="a file holding the SQLAlchemy URL (default: PIPETUNE_DATABASE_URL_FILE), so "
        "that a password does not show in ps; PIPETUNE_DATABASE_URL works too"
    )
    parser.add_argument("--log-level", default="info", help="uvicorn log level (default info)")
    parser.add_argument("--workers", type=int, default=None,
                        help="pipetune worker processes that run the searches (default "
                        "PIPETUNE_RUN_WORKERS, 1; 0: in this process)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, extra: list[str], parser: argparse.ArgumentParser) -> int:
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    import uvicorn

    from service.commands._uvicorn import uvicorn_options
    from service.core.config import get_settings
    from service.main import create_app

    settings = get_settings(database_url=args.database_url, run_workers=args.workers,
                            database_url_file=args.database_url_file,
                            require_auth=True if not is_loopback(args.host) else None)
    log_to_stderr(args.log_level)
    print(f"pipetune: database {describe_database(settings.database_url)}", file=sys.stderr)
    if settings.require_auth:
        _say_keys_needed(settings.database_url, args.host)
    print(f"pipetune: dashboard http://{_url_host(args.host)}:{args.port}/ "
          f"(API docs at /docs)", file=sys.stderr, flush=True)
    workers = _start_workers(settings, args.log_level)
    try:
        uvicorn.run(create_app(settings, run_background=workers is None), host=args.host,
                    port=args.port, log_level=args.log_level, **uvicorn_options())
    finally:
        if workers is not None:
            workers.close()
    return 0


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` serves this machine only (keys are required otherwise)."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def _say_keys_needed(url: str, host: str) -> None:
    """Why requests need a key, and how to make the first one if there is none."""
    from service.commands._database import open_database
    from service.db import keys as keys_repo
    from service.db.repositories import session_scope

    with open_database(url) as db, session_scope(db.read_sessions) as session:
        live = keys_repo.list_keys(session, include_revoked=False)
    why = "PIPETUNE_REQUIRE_AUTH is set" if is_loopback(host) else f"{host} is not loopback"
    print(f"pipetune: API keys required ({why}); {len(live)} active", file=sys.stderr)
    if not live:
        print("pipetune: make one with: pipetune keys create NAME --scope tune",
              file=sys.stderr)


def _start_workers(settings: Settings, log_level: str) -> WorkerProcesses | None:
    """``settings.run_workers`` worker processes (the database migrated first, so that
    they do not race to migrate it), or ``None`` to run searches in this process."""
    if settings.run_workers == 0:
        return None
    from service.commands._database import open_database
    from service.runs.worker_processes import WorkerProcesses

    # Through the Database's engine, which makes a SQLite file's folder first: on a new
    # account the data directory does not exist yet (issue 42).
    with open_database(settings.database_url):
        pass
    workers = WorkerProcesses(settings.run_workers, settings.database_url, log_level)
    workers.start()
    print(f"pipetune: searches run in {settings.run_workers} worker process(es)",
          file=sys.stderr)
    return workers


def describe_database(url: str) -> str:
    """The database as a user looks for it: a SQLite file's path, else the URL without
    its password."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return f"{parsed.database or ':memory:'} (SQLite)"
    return parsed.render_as_string(hide_password=True)


def _url_host(host: str) -> str:
    """A host to type in a browser for the bind address."""
    if host in ("0.0.0.0", "::", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def log_to_stderr(level: str) -> None:
    """pipetune's own log lines (resumed runs, failed baselines) beside uvicorn's."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s:     %(name)s: %(message)s"))
    numeric = logging.getLevelName(level.upper())
    for name in ("service", "workers"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(numeric if isinstance(numeric, int) else logging.INFO)
