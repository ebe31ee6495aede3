"""``pipetune cache export FILE`` / ``pipetune cache import FILE``: the cache as JSON.

Export writes the workloads, the devices and the best schedule of each workload on each
device with its kernel (``--op`` / ``--device`` to take part of it). Import checks the
whole file first (its shape, every workload's params and key, every schedule's and
kernel's hash) and imports nothing if anything is wrong, naming where; then, per
schedule, the faster of the cached and the imported one stays (a GPU timing beats a
simulated one), so importing the same file again changes nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from scheduler_search.ops import OPERATORS
from service.commands._database import add_database_option, open_database

if TYPE_CHECKING:
    from service.db.cache_file import CacheFile


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
        text = export_cache(session, op=args.op, device=args.device).model_dump_json(indent=1)
        count = len(json.loads(text)["schedules"])
    if args.file == "-":
        sys.stdout.write(text + "\n")
    else:
        Path(args.file).write_text(text + "\n")
        print(f"exported {count} schedule{'s' * (count != 1)} to {args.file}")
    return 0


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
        counts = import_cache(session, cache)
    print(f"imported {args.file}: {counts.added} new, {counts.replaced} faster than the "
          f"cached one, {counts.kept} kept (the cached one is as fast or faster)")
    return 0


def read_cache_file(path: Path) -> tuple[CacheFile | None, list[str]]:
    """The cache file at ``path``, checked, or None and what is wrong (``where: what``)."""
    from service.db.cache_file import CacheFile

    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        return None, [f"cannot read it: {exc.strerror or exc}"]
    except (ValueError, RecursionError) as exc:
        return None, [f"not JSON: {exc}"]
    if not isinstance(data, dict) or data.get("format") != "pipetune-cache":
        return None, ['not a pipetune cache file (no "format": "pipetune-cache"; write one '
                      "with pipetune cache export)"]
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
    operator), a schedule's hash from its sProgram, a kernel's from its artifact."""
    from codegen import KernelArtifact
    from scheduler_search.ops import SpecError, parse_spec
    from scheduler_search.sprogram import SProgram

    problems = []
    for i, workload in enumerate(cache.workloads):
        try:
            key = parse_spec(workload.op, workload.params).workload_key()
        except (SpecError, ValidationError) as exc:
            problems.append(f"workloads[{i}].params: not a valid {workload.op} spec: {exc}")
            continue
        if key != workload.key:
            problems.append(f"workloads[{i}].key: does not match its params ({key})")
    for i, entry in enumerate(cache.schedules):
        try:
            digest = SProgram.from_dict(entry.schedule).hash
        except (KeyError, TypeError, ValueError) as exc:
            problems.append(f"schedules[{i}].schedule: not an sProgram: {exc!r}")
        else:
            if digest != entry.schedule_hash:
                problems.append(f"schedules[{i}].schedule_hash: not its schedule's ({digest})")
        if entry.kernel is None:
            continue
        try:
            artifact = KernelArtifact.from_dict(entry.kernel.artifact)
        except (KeyError, TypeError, ValueError) as exc:
            problems.append(f"schedules[{i}].kernel.artifact: not a KernelArtifact: {exc!r}")
            continue
        if artifact.hash != entry.kernel.hash:
            problems.append(f"schedules[{i}].kernel.hash: not its artifact's ({artifact.hash})")
        if artifact.schedule_hash != entry.schedule_hash:
            problems.append(f"schedules[{i}].kernel: the kernel of another schedule")
    return problems
