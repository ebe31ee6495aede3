"""Every measurement of range runs kept by ``bench/dynamic.py --keep-db``, by candidate, as
one JSON file: for re-cutting a range offline when the cut changes, without the GPU
(``RangeSearch`` with the records as its history, its ``cut`` -
``scheduler_search.search.range_cut.RangeCut`` - over the measured sizes; or
``scheduler_search.search.buckets.partition`` over the measurements alone).

For each database: the range run's candidates (schedule hash, choices without the range
dimension, latency in microseconds at each measured size; null where the measurement
failed) and the bucket table the run stored.

    PYTHONPATH=. python3 bench/range_measurements.py OUT/db/gemm-float16.db ... \\
        --label h --code-commit 23b7089 --out bench/results/range-measurements-DATE.json
    PYTHONPATH=. python3 bench/range_measurements.py OUT2/db/gemm-bfloat16.db --label i \
        --code-commit e5261fd --append --out bench/results/range-measurements-DATE.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import dated_result, write_json  # noqa: E402


def range_run(path: Path) -> dict[str, Any]:
    """The first range run of the database at ``path``: its table and measurements."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        run_id, op, dim, params, buckets = db.execute(
            "SELECT run_id, op, dim, params, buckets FROM pipetune_range_tables "
            "ORDER BY id LIMIT 1").fetchone()
        rows = db.execute("SELECT schedule_hash, choices, latency_us, status FROM "
                          "pipetune_trials WHERE run_id = ? ORDER BY number",
                          (run_id,)).fetchall()
    finally:
        db.close()
    candidates: dict[str, dict[str, Any]] = {}
    for schedule_hash, choices_json, latency_us, status in rows:
        choices = json.loads(choices_json)
        size = choices.pop(dim)
        entry = candidates.setdefault(schedule_hash, {"schedule_hash": schedule_hash,
                                                      "choices": choices, "latency_us": {}})
        entry["latency_us"][str(size)] = latency_us if status == "ok" else None
    return {"op": op, "dim": dim, "params": json.loads(params),
            "buckets": json.loads(buckets), "candidates": list(candidates.values())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("databases", nargs="+", type=Path)
    parser.add_argument("--label", default="", help="the run's name in its results files")
    parser.add_argument("--code-commit", default="", help="the commit the run's code was")
    parser.add_argument("--append", action="store_true",
                        help="add these runs to the runs already in --out")
    parser.add_argument("--out", default=dated_result("range-measurements"))
    args = parser.parse_args(argv)
    runs = [{"database": path.name, "label": args.label, "code_commit": args.code_commit,
             **range_run(path)} for path in args.databases]
    earlier = json.loads(Path(args.out).read_text())["runs"] if args.append else []
    write_json(args.out, {"date": datetime.date.today().isoformat(),
                          "suite": "range-measurements", "runs": earlier + runs})
    for run in runs:
        print(f"{run['database']}: {len(run['candidates'])} candidates, "
              f"{len(run['buckets'])} buckets")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
