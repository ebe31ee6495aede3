"""Dynamic shapes: an operator tuned once for a range of sizes, then timed against its
vendor peer at sizes the range run never measured (docs/dynamic.md).

Two workloads (``--op``), for each dtype (fp16 and bf16), in one process on one GPU:

- **gemm**: n = k = 4096 by default, B stored n x k as a linear layer's weight, m over
  ``--low``..``--high`` (1..16384); the peer is cuBLAS (``torch.matmul(a, b.t())``).
- **attention**: self-attention with seq_q = seq_kv = seq over ``--low``..``--high``
  (128..16384; one tied range axis), batch 1, 32 query heads over 8 kv heads,
  head_dim 128, bhsd; the peer is cuDNN's ``scaled_dot_product_attention``.

First, once a process, a **warm-up**: an untimed exact run at a size the timed runs never
tune (``--warm-up-trials``), so that a freshly started machine's slow first run is charged
to neither of the two runs whose wall times are compared. Then, per dtype:

1. **The range run**: ``pipetune.tune`` with the range dimension(s) given as ``{"min",
   "max"}``, from an empty cache (a database of its own), its wall time from the call to
   the bucket table.
2. **One exact-shape run** at ``--exact`` with the same budget per bucket (the range
   run's measurements over its buckets, as trials), its wall time: the range run's cost
   against it.
3. **Sizes it never measured**: ``--sizes`` sizes drawn log-uniformly in the range (seeded),
   none of those the run sampled. At each, pipetune's range kernel as users call it
   (``pipetune.load(range)(...)``: the bucket lookup and the bucket's kernel bound to the
   size) and the peer, each checked against the other, then timed interleaved
   (``bench/launch_overhead.py``'s method: each figure after a cool-down, alternating who
   goes first, median of rounds): **eager** (``do_bench`` on the call), **back to back**
   (events around calls cycling input copies beyond 3x L2) and **graph** (the replay of a
   captured CUDA graph of calls). Ratios are the peer's time over pipetune's (> 1:
   pipetune faster); the geometric mean and the least over the sizes.

    PYTHONPATH=. python3 bench/dynamic.py --op gemm --dtypes float16 \\
        --out bench/results/dynamic-DATE.json

``--draw-pairs 3 --layouts nk kn`` runs the GEMM range on three (n, k) pairs drawn with
``--pair-seed`` (logged in the results; neither a power of two nor a GEMM suite dimension),
in both B layouts, and adds the geometric mean over every size of every case. A pair and
layout take about three minutes on an H200, so ``--pair-indices 0`` (then 1, 2) runs
some of the drawn pairs only: one device call each, every file naming the whole draw.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import logging
import math
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import dated_result, geomean, tree_state, write_json  # noqa: E402
from bench.launch_overhead import (  # noqa: E402
    copies_for_cold_l2,
    first_output,
    peer_inputs,
    three_figures,
)

FIGURES = ("eager", "back_to_back", "graph")
#: GPU time one back-to-back or graph figure aims at (microseconds): fewer calls of a
#: long kernel (attention at seq 16384 takes milliseconds).
FIGURE_BUDGET_US = 50_000.0


@dataclass(frozen=True)
class Workload:
    """One operator's range workload: ``dims`` all take the same size (a tied axis),
    ``fixed`` the other parameters; the peer's name in the results."""

    op: str
    dims: tuple[str, ...]
    fixed: dict[str, Any]
    peer: str

    def at(self, size: int) -> dict[str, Any]:
        """The exact params at ``size``."""
        return {**self.fixed, **dict.fromkeys(self.dims, size)}

    def ranged(self, low: int, high: int) -> dict[str, Any]:
        """The params with the range."""
        return {**self.fixed, **{dim: {"min": low, "max": high} for dim in self.dims}}


def workload(args: argparse.Namespace, dtype: str) -> Workload:
    if args.op == "gemm":
        return Workload("gemm", ("m",), {"n": args.n, "k": args.k, "dtype": dtype,
                                         "b_layout": args.layout}, "cublas")
    return Workload("attention", ("seq_q", "seq_kv"),
                    {"batch": args.batch, "heads": args.heads, "kv_heads": args.kv_heads,
                     "head_dim": args.head_dim, "causal": args.causal, "dtype": dtype,
                     "layout": "bhsd"}, "cudnn")


#: Drawn (n, k) pairs: multiples of PAIR_STEP in PAIR_RANGE, log-uniform, neither a power
#: of two nor a dimension of the GEMM suite, so that a range run is judged on weights that
#: development never tuned for (issue 44: dynamic m that holds on any (n, k)).
PAIR_RANGE, PAIR_STEP = (1024, 16384), 64


def draw_pairs(count: int, seed: int) -> list[tuple[int, int]]:
    """``count`` distinct (n, k) pairs drawn with ``seed`` (logged with the results)."""
    from scheduler_search.ops.suites import GEMM_SHAPES

    suite = {dim for shape in GEMM_SHAPES for dim in shape}
    rng = random.Random(seed)
    low, high = PAIR_RANGE

    def one() -> int:
        while True:
            value = round(math.exp(rng.uniform(math.log(low), math.log(high))) / PAIR_STEP)
            value *= PAIR_STEP
            if low <= value <= high and value & (value - 1) and value not in suite:
                return value

    pairs: list[tuple[int, int]] = []
    while len(pairs) < count:
        pair = (one(), one())
        if pair not in pairs:
            pairs.append(pair)
    return pairs


def unseen_sizes(low: int, high: int, count: int, sampled: set[int], seed: int) -> list[int]:
    """``count`` distinct sizes log-uniform in ``low..high``, none of ``sampled``."""
    rng = random.Random(seed)
    chosen: set[int] = set()
    while len(chosen) < count:
        size = round(math.exp(rng.uniform(math.log(low), math.log(high + 0.5))))
        if low <= size <= high and size not in sampled:
            chosen.add(size)
    return sorted(chosen)


def tune_range(work: Workload, args: argparse.Namespace,
               database_url: str) -> tuple[Any, float]:
    """The range run from an empty cache: (its TuneResult, wall seconds)."""
    import pipetune

    budget = {"trials": args.trials} if args.trials else {}
    if args.seconds:
        budget["seconds"] = args.seconds
    started = time.perf_counter()
    result = pipetune.tune(work.op, device="auto", budget=budget, database_url=database_url,
                           progress=False, **work.ranged(args.low, args.high))
    return result, time.perf_counter() - started


def tune_exact(work: Workload, size: int, trials: int,
               database_url: str) -> tuple[Any, float]:
    """One exact-shape run with ``trials`` measurements: (its TuneResult, wall seconds)."""
    import pipetune

    started = time.perf_counter()
    result = pipetune.tune(work.op, device="auto", budget={"trials": trials},
                           database_url=database_url, progress=False, force=True,
                           **work.at(size))
    return result, time.perf_counter() - started


def warm_up(work: Workload, trials: int, database_url: str) -> float:
    """An untimed exact run of a size no timed run tunes, before them: the first run of a
    process on a freshly started GPU machine measured the same candidates at 0.6x the
    pace of the next (H200, 2026-12-03: 640 measurements in 33 s, then 19 s), which would
    be charged to the range run alone. Its wall seconds (0: skipped)."""
    import pipetune

    if trials <= 0:
        return 0.0
    started = time.perf_counter()
    pipetune.tune(work.op, device="auto", budget={"trials": trials},
                  database_url=database_url, progress=False, force=True,
                  **work.at(WARM_UP_SIZE))
    return time.perf_counter() - started


#: The warm-up run's size (along the range's dimension).
WARM_UP_SIZE = 200


def time_size(torch: Any, kernel: Any, size: int, work: Workload,
              args: argparse.Namespace) -> dict[str, Any]:
    """pipetune's range kernel against the peer at ``size``: the error between them and
    the three figures' medians and ratios."""
    from triton.testing import do_bench

    params = work.at(size)
    inputs, peer = peer_inputs(torch, work.op, params)
    copies = [(inputs, peer)] + [peer_inputs(torch, work.op, params)
                                 for _ in range(copies_for_cold_l2(torch, inputs) - 1)]
    calls = {"pipetune": lambda: kernel(*inputs), "peer": peer}
    cycled = {"pipetune": [lambda i=i: kernel(*i) for i, _ in copies],
              "peer": [p for _, p in copies]}
    ours, ref = first_output(calls["pipetune"]()).float(), first_output(peer()).float()
    bucket = kernel.bucket_of(size)
    row: dict[str, Any] = {"size": size, f"rel_error_vs_{work.peer}": float(
        (ours - ref).norm() / ref.norm()), "bucket": [bucket.low, bucket.high]}
    eager = {label: do_bench(call, return_mode="median") * 1e3 for label, call in calls.items()}
    per_call_us = max(eager.values())
    n_calls = max(3, min(args.calls, int(FIGURE_BUDGET_US / per_call_us)))
    n_graph = max(2, min(args.graph_calls, int(FIGURE_BUDGET_US / per_call_us)))
    row |= three_figures(torch, calls, cycled, (n_calls, n_graph), args.rounds,
                         args.cool_down_s, work.peer)
    return row


def run_dtype(dtype: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import torch

    import pipetune

    work = workload(args, dtype)
    url = f"sqlite:///{workdir / f'{args.op}-{dtype}.db'}"
    result, range_s = tune_range(work, args, url)
    artifact = result.kernel
    if not artifact or artifact.get("kind") != "range":
        return {"op": args.op, "dtype": dtype, "error": f"no range artifact: {result.status}",
                "run": result.run}
    buckets = artifact["buckets"]
    measured = int((result.run or {}).get("trials_done") or 0)
    per_bucket = max(1, measured // len(buckets))
    exact, exact_s = tune_exact(work, args.exact, per_bucket, url)
    kernel = pipetune.load(artifact)
    sampled = set(artifact.get("sampled") or ())
    rows = []
    for size in unseen_sizes(args.low, args.high, args.sizes, sampled, args.seed):
        row = time_size(torch, kernel, size, work, args)
        rows.append(row)
        print(f"{args.op} {dtype} size={size:<6} bucket {row['bucket']}  err "
              f"{row[f'rel_error_vs_{work.peer}']:.1e}  "
              + "  ".join(f"{f} {row[f'{f}_ratio']:.3f}" for f in FIGURES), flush=True)
    summary = {f"{f}_geomean": geomean([r[f"{f}_ratio"] for r in rows]) for f in FIGURES}
    summary |= {f"{f}_min": min(r[f"{f}_ratio"] for r in rows) for f in FIGURES}
    return {
        "op": args.op, "dtype": dtype, "peer": work.peer, "params": work.fixed,
        "range_dims": list(work.dims), "range": {"min": args.low, "max": args.high},
        "range_run": {"wall_s": range_s, "run": result.run, "measurements": measured,
                      "buckets": [{k: b[k] for k in ("low", "high", "loss")}
                                  | {"schedule_hash": b["kernel"]["schedule_hash"],
                                     "choices": b["kernel"]["extra"].get("choices")}
                                  for b in buckets],
                      "sampled": sorted(sampled)},
        "exact_run": {"size": args.exact, "trials": per_bucket, "wall_s": exact_s,
                      "latency_us": exact.latency_us,
                      "speedup_vs_baseline": exact.speedup_vs_baseline},
        "range_over_exact_wall": range_s / exact_s,
        "sizes": rows, **summary,
    }


#: Per operator: the range's ends and the exact run's size.
RANGE_DEFAULTS = {"gemm": (1, 16384, 4096), "attention": (128, 16384, 4096)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--op", choices=sorted(RANGE_DEFAULTS), default="gemm")
    parser.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"])
    parser.add_argument("--n", type=int, default=4096, help="gemm")
    parser.add_argument("--k", type=int, default=4096, help="gemm")
    parser.add_argument("--layouts", nargs="+", choices=("nk", "kn"), default=["nk"],
                        help="gemm: B stored n x k (a linear layer's weight) and/or k x n")
    parser.add_argument("--draw-pairs", type=int, default=0,
                        help="gemm: tune this many drawn (n, k) pairs instead of --n --k")
    parser.add_argument("--pair-seed", type=int, default=44, help="the pairs' seed")
    parser.add_argument("--pair-indices", type=int, nargs="+", default=None,
                        help="gemm: run only these of the drawn pairs (0 = the first)")
    parser.add_argument("--batch", type=int, default=1, help="attention")
    parser.add_argument("--heads", type=int, default=32, help="attention")
    parser.add_argument("--kv-heads", type=int, default=8, help="attention")
    parser.add_argument("--head-dim", type=int, default=128, help="attention")
    parser.add_argument("--causal", action="store_true", help="attention")
    parser.add_argument("--low", type=int, help="the range's least size (per op default)")
    parser.add_argument("--high", type=int, help="the range's largest size")
    parser.add_argument("--exact", type=int, help="the exact run's size")
    parser.add_argument("--trials", type=int, default=0,
                        help="the range run's measurements (default: the service's)")
    parser.add_argument("--seconds", type=float, default=0.0, help="the range run's time cap")
    parser.add_argument("--sizes", type=int, default=32, help="unseen sizes timed")
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--graph-calls", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cool-down-s", type=float, default=0.2)
    parser.add_argument("--log-level", default="warning",
                        help="the range search's log on stderr (info: its plan and phases)")
    parser.add_argument("--warm-up-trials", type=int, default=24,
                        help="an untimed exact run of this many trials before the timed "
                             "runs (0: none)")
    parser.add_argument("--keep-db", type=Path, default=None,
                        help="keep the runs' SQLite databases in this folder (every "
                             "measurement of the range run; default: a scratch folder)")
    parser.add_argument("--out", default=dated_result("dynamic"))
    args = parser.parse_args(argv)
    low, high, exact = RANGE_DEFAULTS[args.op]
    args.low, args.high = args.low or low, args.high or high
    args.exact = args.exact or exact
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    pairs = draw_pairs(args.draw_pairs, args.pair_seed) if args.draw_pairs else [
        (args.n, args.k)]
    if args.draw_pairs and args.pair_indices is not None:
        pairs = [pairs[i] for i in args.pair_indices]
    args.layout = args.layouts[0]
    with tempfile.TemporaryDirectory() as scratch:
        workdir = args.keep_db or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        # Once a process: the machine, not the dtype, is what warms up.
        warm_up_s = warm_up(workload(args, args.dtypes[0]), args.warm_up_trials,
                            f"sqlite:///{workdir / 'warm-up.db'}")
        cases = []
        for (n, k), layout in itertools.product(pairs, args.layouts):
            weight = argparse.Namespace(**{**vars(args), "n": n, "k": k, "layout": layout})
            folder = workdir / f"{n}x{k}-{layout}"
            folder.mkdir(exist_ok=True)
            for dtype in args.dtypes:
                cases.append(run_dtype(dtype, weight, folder))
                # after every case: a run cut at its time cap keeps what it measured
                write_results(args, pairs, warm_up_s, cases, complete=False)
    ok = [c for c in cases if "error" not in c]
    for case in ok:
        print(f"{args.op} {case['dtype']}: range run {case['range_run']['wall_s']:.1f} s "
              f"({len(case['range_run']['buckets'])} buckets), exact run "
              f"{case['exact_run']['wall_s']:.1f} s: {case['range_over_exact_wall']:.2f}x; "
              + "  ".join(f"{f} {case[f'{f}_geomean']:.3f} (min {case[f'{f}_min']:.3f})"
                          for f in FIGURES))
    write_results(args, pairs, warm_up_s, cases, complete=True)
    return 0 if len(ok) == len(cases) else 1


def write_results(args: argparse.Namespace, pairs: list[tuple[int, int]], warm_up_s: float,
                  cases: list[dict[str, Any]], *, complete: bool) -> None:
    """The results file so far (``complete``: every case of the run has run)."""
    every = [row for case in cases if "error" not in case for row in case["sizes"]]
    overall = ({f"{f}_geomean": geomean([r[f"{f}_ratio"] for r in every]) for f in FIGURES}
               if every else {})
    write_json(args.out, {"date": datetime.date.today().isoformat(), "suite": "dynamic",
                          **tree_state(), "complete": complete, "overall": overall,
                          "pairs": {"seed": args.pair_seed if args.draw_pairs else None,
                                    "drawn": (draw_pairs(args.draw_pairs, args.pair_seed)
                                              if args.draw_pairs else pairs),
                                    "run": pairs, "layouts": args.layouts},
                          "warm_up": {"size": WARM_UP_SIZE, "trials": args.warm_up_trials,
                                      "wall_s": warm_up_s},
                          "cases": cases})


if __name__ == "__main__":
    raise SystemExit(main())
