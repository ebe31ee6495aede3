"""``pipetune serve [--host] [--port] [--database-url]``: the API server (uvicorn).

Says on start where its database is and where the dashboard answers. The database is
migrated on start; runs left by a dead server are resumed (or marked interrupted with
``PIPETUNE_ON_RESTART=interrupt``), each logged.
"""

from __future__ import annotations

import argparse
import logging
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="run the API server", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument(
        "--database-url", default=None, help="SQLAlchemy URL (default: PIPETUNE_DATABASE_URL, "
        "else a SQLite file in the user's data directory)"
    )
    parser.add_argument("--log-level", default="info", help="uvicorn log level (default info)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, extra: list[str], parser: argparse.ArgumentParser) -> int:
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    import uvicorn

    from service.core.config import get_settings
    from service.main import create_app

    settings = get_settings(database_url=args.database_url)
    _log_to_stderr(args.log_level)
    print(f"pipetune: database {describe_database(settings.database_url)}", file=sys.stderr)
    print(f"pipetune: dashboard http://{_url_host(args.host)}:{args.port}/ "
          f"(API docs at /docs)", file=sys.stderr, flush=True)
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level=args.log_level)
    return 0


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


def _log_to_stderr(level: str) -> None:
    """pipetune's own log lines (resumed runs, failed baselines) beside uvicorn's."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s:     %(name)s: %(message)s"))
    numeric = logging.getLevelName(level.upper())
    for name in ("service", "workers"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(numeric if isinstance(numeric, int) else logging.INFO)
