"""The ``pipetune`` command line: one subcommand per module in ``service/commands/``.

Each command module exposes ``register(subparsers)`` (adds its parser and sets
``handler``) so that adding a command is adding a module and a line to ``COMMANDS``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: Subcommand modules, imported lazily so that ``pipetune space`` never loads the web
#: stack or a GPU library.
COMMANDS = ("space", "tune", "runs", "schedules", "cache", "serve", "worker", "keys", "db",
            "render", "export", "node")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pipetune",
        description="Kernel autotuning with software-defined pipelining (sTask-graphs).",
    )
    parser.add_argument("--version", action="version", version=f"pipetune {_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"service.commands.{name}").register(subparsers)
    return parser


def _version() -> str:
    """The installed distribution's version (the source tree's when not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pipetune")
    except PackageNotFoundError:
        return "0+unknown"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    return int(args.handler(args, extra, parser) or 0)


if __name__ == "__main__":
    sys.exit(main())
