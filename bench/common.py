"""What the suite benchmarks share: the tree they ran at, their geometric means, their
result files, and the two timing methods (quick for the search, final for the ratios)."""

from __future__ import annotations

import datetime
import json
import math
import statistics
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def tree_state() -> dict[str, Any]:
    """The commit the candidates were generated at, and whether the code was edited."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    dirty = bool(subprocess.run(
        ["git", "status", "--porcelain", "codegen", "bench", "scheduler_search"],
        capture_output=True, text=True, cwd=ROOT).stdout.strip())
    return {"commit": commit, "dirty": dirty}


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
