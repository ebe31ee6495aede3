"""What ``pipetune runs`` and ``pipetune schedules`` share: their filters' checks and a
workload's shape in one line."""

from __future__ import annotations

import argparse
from typing import Any


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
