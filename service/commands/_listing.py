"""What ``pipetune runs`` and ``pipetune schedules`` share: their filters, the filters'
checks and a workload's shape in one line."""

from __future__ import annotations

import argparse
from typing import Any

from scheduler_search.ops import OPERATORS
from service.commands._database import add_database_option


def add_filters(parser: argparse.ArgumentParser, *, what: str, limit: int) -> None:
    """``--op``, ``--device``, ``--limit``, ``--json`` and the database option."""
    parser.add_argument("--op", choices=sorted(OPERATORS))
    parser.add_argument("--device", help="a device name (sim:h200, cuda:0) or key")
    parser.add_argument("--limit", type=int, default=limit,
                        help=f"at most this many (default {limit})")
    parser.add_argument("--json", action="store_true",
                        help=f"print {{data: [{what}...], count}} as the API does")
    add_database_option(parser)


def check_filters(args: argparse.Namespace) -> str | None:
    """What is wrong with ``--device`` or ``--limit``, or None."""
    from service.runs.devices import device_filter_error

    if args.limit < 1:
        return f"--limit: must be at least 1, not {args.limit}"
    if args.device is not None and (problem := device_filter_error(args.device)):
        return f"--device: {problem}"
    return None


def shape(params: dict[str, Any]) -> str:
    """A workload's params in one line: ``m=4096 n=4096 k=4096 dtype=float16``."""
    return " ".join(f"{name}={value}" for name, value in params.items())
