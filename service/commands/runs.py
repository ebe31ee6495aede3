"""``pipetune runs [--status S] [--op OP] [--device D] [--limit N] [--json]``: recent
runs, newest first, from the database (``GET /v1/runs`` without a server)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from service.commands._database import open_database
from service.commands._listing import add_filters, check_filters, shape
from service.db.models import RunStatus


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "runs", help="list recent tuning runs", description=__doc__,
        epilog="Example: pipetune runs --status running --op gemm")
    parser.add_argument("--status", choices=[s.value for s in RunStatus])
    add_filters(parser, what="run", limit=20)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, extra: list[str], parser: argparse.ArgumentParser) -> int:
    from service.db import repositories as repo
    from service.db.repositories import session_scope
    from service.schemas import RunPublic, RunsPublic

    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if (problem := check_filters(args)) is not None:
        print(f"pipetune runs: {problem}", file=sys.stderr)
        return 2
    with open_database(args.database_url) as db, session_scope(db.read_sessions) as session:
        rows, count = repo.list_runs(session, status=args.status, op=args.op,
                                     device=args.device, limit=args.limit)
        runs = RunsPublic(data=[RunPublic.of(r) for r in rows], count=count)
    if args.json:
        print(runs.model_dump_json(indent=2))
        return 0
    if not runs.data:
        print("no runs" + (" match" if args.status or args.op or args.device else " yet"))
        return 0
    print(f"{'id':>5}  {'status':<11} {'phase':<9} {'op':<20} {'device':<10} {'trials':>11}  "
          f"{'best us':>10}  shape")
    for r in runs.data:
        print(_line(r.model_dump(mode="json")))
    if count > len(runs.data):
        print(f"({len(runs.data)} of {count}; --limit for more)")
    return 0


def _line(run: dict[str, Any]) -> str:
    best = run["best"]
    latency = f"{best['latency_us']:.3f}" if best else "-"
    trials = f"{run['trials_done']}/{run['budget']['trials']}"
    return (f"{run['id']:>5}  {run['status']:<11} {run['phase']:<9} "
            f"{run['workload']['op']:<20} {run['device']:<10} {trials:>11}  {latency:>10}  "
            f"{shape(run['workload']['params'])}")
