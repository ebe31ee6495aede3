"""``pipetune db upgrade [--database-url]``: migrate the database to the newest schema;
``pipetune db current`` prints its revision."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("db", help="database migrations", description=__doc__)
    actions = parser.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    for name, help_text in (("upgrade", "migrate to the newest schema"),
                            ("current", "print the database's schema revision")):
        action = actions.add_parser(name, help=help_text)
        action.add_argument("--database-url", default=None, help="SQLAlchemy URL")
        action.set_defaults(handler=run)


def run(args: argparse.Namespace, extra: list[str], parser: argparse.ArgumentParser) -> int:
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    from service.core.config import get_settings
    from service.core.db import Database
    from service.db import schema
    from service.main import _redacted

    settings = get_settings(database_url=args.database_url)
    db = Database(settings.database_url)
    try:
        if args.db_command == "upgrade":
            schema.migrate(db)
        revision = schema.revision(db)
    finally:
        db.dispose()
    print(f"{_redacted(db.url)}: schema revision {revision} (head {schema.head()})")
    return 0
