"""``pipetune worker [--database-url] [--runs N]``: executes queued tuning runs outside the
API's process.

It claims queued runs from the database (a conditional update: no run is executed twice,
however many workers and servers share the database), writes their heartbeats, resumes
runs whose process died, and stops on SIGTERM or Ctrl-C: runs in progress stop at their
next round and are left for the next worker to resume. If its SQLite file is deleted or
replaced (what ``/healthz`` reports as well), it stops writing and exits with status 1.
``pipetune serve`` starts ``PIPETUNE_RUN_WORKERS`` of them (default 1), so the API's
latency does not depend on the searches; start more by hand, on this host or another
sharing a PostgreSQL database.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from service.commands._database import add_database_option

#: How often a worker started by ``serve`` checks that its parent is still alive.
_PARENT_POLL_S = 1.0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("worker", help="execute queued runs (no API)",
                                   description=__doc__)
    add_database_option(parser)
    parser.add_argument("--runs", type=int, default=None,
                        help="runs executed at once (default PIPETUNE_MAX_CONCURRENT_RUNS)")
    parser.add_argument("--nice", type=int, default=0,
                        help="lower this process's scheduling priority by N (default 0)")
    parser.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--log-level", default="info", help="log level (default info)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, extra: list[str], parser: argparse.ArgumentParser) -> int:
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    from service.commands.serve import describe_database, log_to_stderr
    from service.core.config import get_settings
    from service.core.db import Database
    from service.db import schema
    from service.main import quiet_optuna
    from service.runs.executors import ExecutorRegistry
    from service.runs.manager import RunManager

    if args.nice:
        os.nice(args.nice)
    settings = get_settings(database_url=args.database_url, max_concurrent_runs=args.runs)
    log_to_stderr(args.log_level)
    quiet_optuna()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    db = Database(settings.database_url)
    executors = ExecutorRegistry.from_settings(settings, None)
    manager = RunManager(db, settings, executors)
    try:
        schema.migrate(db)
        db.remember_file()
        manager.start()
        print(f"pipetune worker {os.getpid()}: {settings.max_concurrent_runs} runs at once, "
              f"database {describe_database(settings.database_url)}", file=sys.stderr,
              flush=True)
        while not stop.wait(_PARENT_POLL_S) and manager.stopped_because is None:
            if args.parent_pid is not None and os.getppid() != args.parent_pid:
                break  # serve is gone (even killed): do not outlive it
    finally:
        manager.close()
        executors.close()
        db.dispose()
    if manager.stopped_because is not None:
        print(f"pipetune worker {os.getpid()}: {manager.stopped_because}; stopped",
              file=sys.stderr, flush=True)
        return 1
    return 0
