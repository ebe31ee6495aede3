"""``pipetune serve [--host] [--port] [--database-url]``: the API server (uvicorn).

The database is migrated on start; runs left by a dead server are resumed (or marked
interrupted with ``PIPETUNE_ON_RESTART=interrupt``).
"""

from __future__ import annotations

import argparse


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
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level=args.log_level)
    return 0
