"""``pipetune cache export FILE`` / ``pipetune cache import FILE``: the cache as JSON.

Export writes the workloads, the devices, the best schedule of each workload on each
device with its kernel, and the tuned ranges with their buckets' kernels (``--op`` /
``--device`` to take part of it). Import checks the whole file first (its shape, every
workload's params and key, every range's params and key, every schedule's and kernel's
hash) and imports nothing if anything is wrong, naming where; then, per schedule and per
range, the faster of the cached and the imported one stays (a GPU timing beats a
simulated one), so importing the same file again changes nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from scheduler_search.ops import OPERATORS
from service.commands._database import add_database_option, open_database

if TYPE_CHECKING:
    from service.db.cache_file import (
        CacheFile,
        ImportCounts,
        KernelEntry,
        RangeEntry,
        WorkloadEntry,
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("cache", help="export or import the cache as JSON",
                                   description=__doc__)
    actions = parser.add_subparsers(dest="cache_command", required=True, metavar="ACTION")
    export = actions.add_parser("export", help="write the cache to FILE ('-': stdout)")
    export.add_argument("file", help="the JSON file to write")
    export.add_argument("--op", choices=sorted(OPERATORS))
    export.add_argument("--device", help="a device name (sim:h200, cuda:0) or key")
    imported = actions.add_parser("import", help="add FILE's schedules to the cache")
    imported.add_argument("file", type=Path, help="a file written by pipetune cache export")
    for action in (export, imported):
        add_database_option(action)
        action.set_defaults(handler=run)


def run(args: argparse.Namespace, extra: list[str], parser: argparse.ArgumentParser) -> int:
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.cache_command == "export":
        return _export(args)
    return _import(args)


def _export(args: argparse.Namespace) -> int:
    from service.db.cache_file import export_cache
    from service.db.repositories import session_scope
    from service.runs.devices import device_filter_error

    if args.device is not None and (problem := device_filter_error(args.device)):
        print(f"pipetune cache export: --device: {problem}", file=sys.stderr)
        return 2
    with open_database(args.database_url) as db, session_scope(db.read_sessions) as session:
        cache = export_cache(session, op=args.op, device=args.device)
    text = cache.model_dump_json(indent=1)
    if args.file == "-":
        sys.stdout.write(text + "\n")
    else:
        Path(args.file).write_text(text + "\n")
        ranges = f" and {_plural(len(cache.ranges), 'range table')}" if cache.ranges else ""
        print(f"exported {_plural(len(cache.schedules), 'schedule')}{ranges} to {args.file}")
    return 0


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' * (count != 1)}"


def _import(args: argparse.Namespace) -> int:
    from service.db.cache_file import import_cache
    from service.db.repositories import session_scope

    cache, problems = read_cache_file(args.file)
    if cache is None:
        for problem in problems:
            print(f"pipetune cache import: {args.file}: {problem}", file=sys.stderr)
        print("pipetune cache import: nothing imported", file=sys.stderr)
        return 2
    with open_database(args.database_url) as db, session_scope(db.sessions) as session:
        done = import_cache(session, cache)
    print(f"imported {args.file}: {_outcomes(done.schedules)} (the cached one is as fast "
          "or faster)")
    if cache.ranges:
        print(f"range tables: {_outcomes(done.ranges)}")
    return 0


def _outcomes(counts: ImportCounts) -> str:
    return (f"{counts.added} new, {counts.replaced} faster than the cached one, "
            f"{counts.kept} kept")


def read_cache_file(path: Path) -> tuple[CacheFile | None, list[str]]:
    """The cache file at ``path``, checked, or None and what is wrong (``where: what``)."""
    from service.db.cache_file import VERSIONS, CacheFile

    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        return None, [f"cannot read it: {exc.strerror or exc}"]
    except (ValueError, RecursionError) as exc:
        return None, [f"not JSON: {exc}"]
    if not isinstance(data, dict) or data.get("format") != "pipetune-cache":
        return None, ['not a pipetune cache file (no "format": "pipetune-cache"; write one '
                      "with pipetune cache export)"]
    if data.get("version") not in VERSIONS:
        return None, [f"version: {data.get('version')!r} is not one this pipetune reads "
                      f"({', '.join(map(str, VERSIONS))}); a newer pipetune wrote it? "
                      "Import it with that one, or export again with this one"]
    try:
        cache = CacheFile.model_validate(data)
    except ValidationError as exc:
        return None, [_where(e["loc"]) + e["msg"].removeprefix("Value error, ")
                      for e in exc.errors()]
    problems = _content_problems(cache)
    return (None, problems) if problems else (cache, [])


def _where(loc: tuple[object, ...]) -> str:
    """A pydantic location as a JSON path: ``schedules[2].latency_us: ``."""
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    return f"{path}: " if path else ""


def _content_problems(cache: CacheFile) -> list[str]:
    """Keys and hashes recomputed: a workload's key from its params (validated by its
    operator), a range's fixed key from its params, a schedule's hash from its sProgram,
    a kernel's from its artifact."""
    problems = []
    for i, workload in enumerate(cache.workloads):
        problems += _workload_problems(f"workloads[{i}]", workload)
    for i, entry in enumerate(cache.schedules):
        problems += _schedule_problems(f"schedules[{i}]", entry.schedule, entry.schedule_hash)
        if entry.kernel is not None:
            problems += _kernel_problems(f"schedules[{i}].kernel", entry.kernel,
                                         entry.schedule_hash)
    for i, table in enumerate(cache.ranges):
        problems += _range_problems(f"ranges[{i}]", table)
    return problems


def _workload_problems(where: str, workload: WorkloadEntry) -> list[str]:
    from scheduler_search.ops import SpecError, parse_spec

    try:
        key = parse_spec(workload.op, workload.params).workload_key()
    except (SpecError, ValidationError) as exc:
        return [f"{where}.params: not a valid {workload.op} spec: {exc}"]
    return [f"{where}.key: does not match its params ({key})"] if key != workload.key else []


def _schedule_problems(where: str, schedule: dict[str, Any], schedule_hash: str) -> list[str]:
    from scheduler_search.sprogram import SProgram

    try:
        digest = SProgram.from_dict(schedule).hash
    except (KeyError, TypeError, ValueError) as exc:
        return [f"{where}.schedule: not an sProgram: {exc!r}"]
    if digest != schedule_hash:
        return [f"{where}.schedule_hash: not its schedule's ({digest})"]
    return []


def _kernel_problems(where: str, kernel: KernelEntry, schedule_hash: str) -> list[str]:
    """A kernel's hash recomputed, and that it is the kernel of ``schedule_hash``."""
    from codegen import KernelArtifact

    try:
        artifact = KernelArtifact.from_dict(kernel.artifact)
    except (KeyError, TypeError, ValueError) as exc:
        return [f"{where}.artifact: not a KernelArtifact: {exc!r}"]
    if artifact.hash != kernel.hash:
        return [f"{where}.hash: not its artifact's ({artifact.hash})"]
    if artifact.schedule_hash != schedule_hash:
        return [f"{where}: the kernel of another schedule"]
    return []


def _range_problems(where: str, table: RangeEntry) -> list[str]:
    """A range's params valid for its operator with ``dim`` a range, its fixed key theirs,
    each bucket's schedule and kernel."""
    from scheduler_search.ops import SpecError, parse_range_spec
    from service.runs.ranges import fixed_key, fixed_params

    try:
        spec = parse_range_spec(table.op, table.params)
    except (SpecError, ValidationError) as exc:
        return [f"{where}.params: not a valid {table.op} range: {exc}"]
    if table.dim not in spec.ranges:
        return [f"{where}.dim: {table.dim} is not a range of its params"]
    problems = []
    if (key := fixed_key(table.op, fixed_params(spec))) != table.fixed_key:
        problems.append(f"{where}.fixed_key: does not match its params ({key})")
    kernels = {k.hash: k for k in table.kernels}
    for i, bucket in enumerate(table.buckets):
        problems += _schedule_problems(f"{where}.buckets[{i}]", bucket.schedule,
                                       bucket.schedule_hash)
        if bucket.kernel_hash is not None:
            problems += _kernel_problems(f"{where}.buckets[{i}].kernel",
                                         kernels[bucket.kernel_hash], bucket.schedule_hash)
    return problems
