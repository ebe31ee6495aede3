"""Dynamic shapes: a GEMM tuned once for a range of m, then timed against cuBLAS at sizes
the range run never measured (docs/dynamic.md).

For each dtype (fp16 and bf16; n = k = 4096 by default, B stored n x k as a linear
layer's weight), in one process on one GPU:

1. **The range run**: ``pipetune.tune(m={"min": 1, "max": 16384}, ...)`` from an empty
   cache (a database of its own), its wall time from the call to the bucket table.
2. **One exact-shape run** at ``--exact-m`` with the same budget per bucket (the range
   run's measurements over its buckets, as trials), its wall time: the range run's cost
   against it.
3. **Sizes it never measured**: ``--sizes`` sizes drawn log-uniformly in the range (seeded),
   none of those the run sampled. At each, pipetune's range kernel as users call it
   (``pipetune.load(range)(a, b)``: the bucket lookup and the bucket's kernel bound to the
   size) and ``torch.matmul(a, b.t())``, each checked against the other, then timed
   interleaved (``bench/launch_overhead.py``'s method: each figure after a cool-down,
   alternating who goes first, median of rounds): **eager** (``do_bench`` on the call),
   **back to back** (events around calls cycling input copies beyond 3x L2) and
   **graph** (the replay of a captured CUDA graph of calls). Ratios are cuBLAS time over
   pipetune time (> 1: pipetune faster); the geometric mean and the least over the sizes.

    PYTHONPATH=. python3 bench/dynamic.py --dtypes float16 --out bench/results/dynamic-DATE.json
"""

from __future__ import annotations

import argparse
import datetime
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import dated_result, geomean, tree_state, write_json  # noqa: E402
from bench.launch_overhead import (  # noqa: E402
    back_to_back_us,
    capture,
    copies_for_cold_l2,
    interleaved,
    replay_us,
)

FIGURES = ("eager", "back_to_back", "graph")


def unseen_sizes(low: int, high: int, count: int, sampled: set[int], seed: int) -> list[int]:
    """``count`` distinct sizes log-uniform in ``low..high``, none of ``sampled``."""
    rng = random.Random(seed)
    chosen: set[int] = set()
    while len(chosen) < count:
        size = round(math.exp(rng.uniform(math.log(low), math.log(high + 0.5))))
        if low <= size <= high and size not in sampled:
            chosen.add(size)
    return sorted(chosen)


def tune_range(params: dict[str, Any], m_range: dict[str, int], args: argparse.Namespace,
               database_url: str) -> tuple[Any, float]:
    """The range run from an empty cache: (its TuneResult, wall seconds)."""
    import pipetune

    budget = {"trials": args.trials} if args.trials else {}
    if args.seconds:
        budget["seconds"] = args.seconds
    started = time.perf_counter()
    result = pipetune.tune("gemm", device="auto", budget=budget, database_url=database_url,
                           progress=False, m=m_range, **params)
    return result, time.perf_counter() - started


def tune_exact(params: dict[str, Any], m: int, trials: int,
               database_url: str) -> tuple[Any, float]:
    """One exact-shape run with ``trials`` measurements: (its TuneResult, wall seconds)."""
    import pipetune

    started = time.perf_counter()
    result = pipetune.tune("gemm", device="auto", budget={"trials": trials},
                           database_url=database_url, progress=False, force=True, m=m,
                           **params)
    return result, time.perf_counter() - started


def time_size(torch: Any, kernel: Any, m: int, params: dict[str, Any],
              args: argparse.Namespace) -> dict[str, Any]:
    """pipetune's range kernel against torch.matmul at ``m``: the error between them and
    the three figures' medians and ratios."""
    from triton.testing import do_bench

    dtype = getattr(torch, params["dtype"])
    n, k = params["n"], params["k"]

    def inputs() -> tuple[Any, Any]:
        return (torch.randn(m, k, device="cuda", dtype=dtype),
                torch.randn(n, k, device="cuda", dtype=dtype))

    a, b = inputs()
    copies = [(a, b)] + [inputs() for _ in range(copies_for_cold_l2(torch, (a, b)) - 1)]
    calls = {"pipetune": lambda: kernel(a, b), "peer": lambda: torch.matmul(a, b.t())}
    cycled = {"pipetune": [lambda x=x, y=y: kernel(x, y) for x, y in copies],
              "peer": [lambda x=x, y=y: torch.matmul(x, y.t()) for x, y in copies]}
    ours, ref = calls["pipetune"]().float(), calls["peer"]().float()
    row: dict[str, Any] = {"m": m, "rel_error_vs_cublas": float((ours - ref).norm()
                                                                / ref.norm()),
                           "bucket": [kernel.bucket_of(m).low, kernel.bucket_of(m).high]}
    graphs = {label: capture(torch, call, args.graph_calls)[0] for label, call in calls.items()}
    timed = {
        "eager": lambda label: do_bench(calls[label], return_mode="median") * 1e3,
        "back_to_back": lambda label: back_to_back_us(torch, cycled[label], args.calls),
        "graph": lambda label: replay_us(torch, graphs[label], args.graph_calls),
    }
    for figure, measure in timed.items():
        samples = interleaved(torch, measure, args.rounds, args.cool_down_s)
        ours_us, peer_us = (statistics.median(samples[x]) for x in ("pipetune", "peer"))
        row[f"{figure}_us"] = {"pipetune": ours_us, "cublas": peer_us}
        row[f"{figure}_ratio"] = peer_us / ours_us
    return row


def run_dtype(dtype: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import torch

    import pipetune

    params = {"n": args.n, "k": args.k, "dtype": dtype, "b_layout": "nk"}
    m_range = {"min": args.m_min, "max": args.m_max}
    url = f"sqlite:///{workdir / f'{dtype}.db'}"
    result, range_s = tune_range(params, m_range, args, url)
    artifact = result.kernel
    if not artifact or artifact.get("kind") != "range":
        return {"dtype": dtype, "error": f"no range artifact: {result.status}",
                "run": result.run}
    buckets = artifact["buckets"]
    measured = int((result.run or {}).get("trials_done") or 0)
    per_bucket = max(1, measured // len(buckets))
    exact, exact_s = tune_exact(params, args.exact_m, per_bucket, url)
    kernel = pipetune.load(artifact)
    sampled = set(artifact.get("sampled") or ())
    sizes = unseen_sizes(args.m_min, args.m_max, args.sizes, sampled, args.seed)
    rows = []
    for m in sizes:
        row = time_size(torch, kernel, m, params, args)
        rows.append(row)
        print(f"{dtype} m={m:<6} bucket {row['bucket']}  err {row['rel_error_vs_cublas']:.1e}  "
              + "  ".join(f"{f} {row[f'{f}_ratio']:.3f}" for f in FIGURES), flush=True)
    summary = {f"{f}_geomean": geomean([r[f"{f}_ratio"] for r in rows]) for f in FIGURES}
    summary |= {f"{f}_min": min(r[f"{f}_ratio"] for r in rows) for f in FIGURES}
    return {
        "dtype": dtype, "params": params, "range": m_range,
        "range_run": {"wall_s": range_s, "run": result.run, "measurements": measured,
                      "buckets": [{k: b[k] for k in ("low", "high", "loss")}
                                  | {"schedule_hash": b["kernel"]["schedule_hash"],
                                     "choices": b["kernel"]["extra"].get("choices")}
                                  for b in buckets],
                      "sampled": sorted(sampled)},
        "exact_run": {"m": args.exact_m, "trials": per_bucket, "wall_s": exact_s,
                      "latency_us": exact.latency_us,
                      "speedup_vs_baseline": exact.speedup_vs_baseline},
        "range_over_exact_wall": range_s / exact_s,
        "sizes": rows, **summary,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--m-min", type=int, default=1)
    parser.add_argument("--m-max", type=int, default=16384)
    parser.add_argument("--exact-m", type=int, default=4096)
    parser.add_argument("--trials", type=int, default=0,
                        help="the range run's measurements (default: the service's)")
    parser.add_argument("--seconds", type=float, default=0.0, help="the range run's time cap")
    parser.add_argument("--sizes", type=int, default=32, help="unseen sizes timed")
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--graph-calls", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cool-down-s", type=float, default=0.2)
    parser.add_argument("--out", default=dated_result("dynamic"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        cases = [run_dtype(dtype, args, Path(scratch)) for dtype in args.dtypes]
    ok = [c for c in cases if "error" not in c]
    for case in ok:
        print(f"{case['dtype']}: range run {case['range_run']['wall_s']:.1f} s "
              f"({len(case['range_run']['buckets'])} buckets), exact run "
              f"{case['exact_run']['wall_s']:.1f} s: {case['range_over_exact_wall']:.2f}x; "
              + "  ".join(f"{f} {case[f'{f}_geomean']:.3f} (min {case[f'{f}_min']:.3f})"
                          for f in FIGURES))
    write_json(args.out, {"date": datetime.date.today().isoformat(), "suite": "dynamic",
                          **tree_state(), "cases": cases})
    return 0 if len(ok) == len(cases) else 1


if __name__ == "__main__":
    raise SystemExit(main())
