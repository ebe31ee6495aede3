"""``pipetune schedules [--op OP] [--device D] [--limit N] [--json]``: the cache, the best
schedule of each workload on each device, newest first (``GET /v1/schedules`` without a
server)."""

from __future__ import annotations

import argparse
import json
import sys

from service.commands._database import open_database
from service.commands._listing import add_filters, check_filters, shape


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "schedules", help="list the cached best schedules", description=__doc__,
        epilog="Example: pipetune schedules --op attention --device cuda:0 --json")
    add_filters(parser, what="schedule", limit=50)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, extra: list[str], parser: argparse.ArgumentParser) -> int:
    from service.db import repositories as repo
    from service.db.repositories import session_scope
    from service.schemas import SchedulePublic

    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if (problem := check_filters(args)) is not None:
        print(f"pipetune schedules: {problem}", file=sys.stderr)
        return 2
    with open_database(args.database_url) as db, session_scope(db.read_sessions) as session:
        rows = repo.list_schedules(session, op=args.op, device=args.device, limit=1_000_000)
        data = [SchedulePublic.of(r).model_dump(mode="json") for r in rows[: args.limit]]
    if args.json:
        json.dump({"data": data, "count": len(rows)}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if not data:
        print("no cached schedules" + (" match" if args.op or args.device else " yet"))
        return 0
    print(f"{'id':>5}  {'op':<20} {'device':<10} {'latency us':>12}  {'run':>5}  "
          f"{'kernel':<12}  shape")
    for s in data:
        simulated = "~" if s["simulated"] else " "
        run_id = s["run_id"] if s["run_id"] is not None else "-"
        kernel = (s["kernel_hash"] or "-")[:12]
        print(f"{s['id']:>5}  {s['workload']['op']:<20} {s['device']:<10} "
              f"{s['latency_us']:>11.3f}{simulated}  {run_id:>5}  {kernel:<12}  "
              f"{shape(s['workload']['params'])}")
    if any(s["simulated"] for s in data):
        print("~ simulated: a cost-model estimate")
    if len(rows) > len(data):
        print(f"({len(data)} of {len(rows)}; --limit for more)")
    return 0
