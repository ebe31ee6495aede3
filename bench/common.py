"""What the suite benchmarks share: the tree they ran at, their geometric means, their
result files, and the two timing methods (quick for the search, final for the ratios)."""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import statistics
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


#: The folders whose code a benchmark's figures depend on.
CODE_FOLDERS = ("codegen", "scheduler_search", "service", "workers", "pipetune", "bench")


def source_sha256(root: Path = ROOT) -> str:
    """A hash of the code as it is on disk (tracked and untracked, not ignored, files of
    :data:`CODE_FOLDERS`): a GPU machine gets a copy of the working tree on top of an
    older commit, so the commit alone does not name the code that ran there, and the same
    hash computed here does."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "--",
                             *CODE_FOLDERS], capture_output=True, text=True, cwd=root).stdout
    digest = hashlib.sha256()
    for name in sorted(set(listed.split())):
        path = root / name
        if path.is_file():
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def tree_state() -> dict[str, Any]:
    """The commit the candidates were generated at, whether the code was edited, and the
    hash of the code itself (:func:`source_sha256`)."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", *CODE_FOLDERS],
                                capture_output=True, text=True, cwd=ROOT).stdout.strip())
    return {"commit": commit, "dirty": dirty, "source_sha256": source_sha256()}


def build_design(space: Any, choices: dict[str, Any]) -> Any | None:
    """The valid sProgram ``choices`` build in ``space``, or None: a hand-written design
    may name a unit the device lacks (Hopper's TMA on an Ampere-class device)."""
    from scheduler_search.sprogram import ScheduleError

    try:
        sprogram, validity = space.build(choices)
    except ScheduleError:
        return None
    return sprogram if validity.ok else None


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else float("nan")


def dated_result(suite: str) -> str:
    """The default results file of ``suite`` run today: ``bench/results/<suite>-<date>.json``."""
    return str(ROOT / "bench" / "results" / f"{suite}-{datetime.date.today().isoformat()}.json")


def write_json(path: str | Path, doc: dict[str, Any]) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))


def timing_configs() -> tuple[Any, Any]:
    """(quick, final): the search's short timing, and the re-timing of winner and peers."""
    from workers import TimingConfig

    quick = TimingConfig(warmup_launches=2, warmup_ms=0.0, min_samples=10, min_time_ms=0.0)
    final = TimingConfig(warmup_launches=3, warmup_ms=10.0, min_samples=30, min_time_ms=20.0)
    return quick, final


def rendered_per_dtype(source: str, sprogram: Any, specs: dict[str, Any],
                       device: Any) -> dict[str, Any]:
    """A prepared candidate: where it came from, and its choices planned and rendered for
    each dtype's spec (hash, choices, artifact), so a GPU run needs no code generation."""
    from codegen import render
    from scheduler_search.sprogram import plan_sprogram

    entry: dict[str, Any] = {"source": source}
    for dtype, spec in specs.items():
        planned = plan_sprogram(spec, device, sprogram.choices)
        entry[dtype] = {"hash": planned.hash, "choices": planned.choices,
                        "artifact": render(planned, spec, device).to_dict()}
    return entry
