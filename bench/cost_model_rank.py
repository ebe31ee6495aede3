"""How well the cost model ranks schedules the GPU measured: per shape, the rank correlation
of its estimates with the measured latencies, and how far from the measured best its
first pick and its best five are.

Reads ``bench/decode_designs.py`` results (each shape's ``tried`` schedules with their
graph-timed latencies), builds each schedule again from its choices and estimates it with
the uncalibrated cost model. Runs on any machine (no GPU: the measurements are in the
files). A search's cost-model picks are only as good as this ranking.

    .venv/bin/python bench/cost_model_rank.py bench/results/decode-designs-2026-12-04*.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _ranks(values: list[float]) -> list[int]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0] * len(values)
    for rank, index in enumerate(order):
        ranks[index] = rank
    return ranks


def spearman(a: list[float], b: list[float]) -> float:
    """Rank correlation of two equally long lists (ties ranked by position)."""
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    var = sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)
    return cov / var**0.5 if var else 0.0


def rank_row(row: dict[str, Any]) -> dict[str, Any] | None:
    """One shape's ranking: estimates against the measured latencies of its schedules."""
    from codegen import feasibility
    from scheduler_search.cost_model import estimate
    from scheduler_search.hardware import get_device
    from scheduler_search.ops.gemm import GemmSpec
    from scheduler_search.space import ScheduleSpace

    device = get_device("h200")
    spec = GemmSpec(**row["params"])
    space = ScheduleSpace(spec, device, feasibility("gemm", device))
    measured, estimated = [], []
    for tried in row["tried"]:
        if tried["status"] != "ok" or not tried["latency_us"]:
            continue
        sprogram, validity = space.build(tried["choices"])
        if validity.ok:
            measured.append(tried["latency_us"])
            estimated.append(estimate(sprogram, spec, device).latency_us)
    if len(measured) < 5:
        return None
    best = min(measured)
    picks = sorted(range(len(estimated)), key=lambda i: estimated[i])  # ties: file order
    p = row["params"]
    return {"shape": f"{p['m']}x{p['n']}x{p['k']}", "schedules": len(measured),
            "spearman": spearman(estimated, measured),
            "first_pick_vs_best": measured[picks[0]] / best,
            "best_of_five_vs_best": min(measured[i] for i in picks[:5]) / best}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path,
                        help="bench/decode_designs.py results files")
    args = parser.parse_args(argv)
    ranked = [r for path in args.results for row in json.loads(path.read_text())["rows"]
              if (r := rank_row(row)) is not None]
    for r in ranked:
        print(f"{r['shape']:>16}  n={r['schedules']:<4} spearman {r['spearman']:.2f}  "
              f"first pick {r['first_pick_vs_best']:.2f}  best of five "
              f"{r['best_of_five_vs_best']:.2f}")
    if ranked:
        print(f"mean spearman {statistics.fmean(r['spearman'] for r in ranked):.3f}, "
              f"geomean first pick "
              f"{statistics.geometric_mean(r['first_pick_vs_best'] for r in ranked):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
