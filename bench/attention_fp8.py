"""FP8 attention against pipetune's own bf16 kernel: the suite's sequence-4096 and -8192
cases (docs/benchmarks.md), e4m3 q, k, v with per-tensor scales, bf16 o.

Two steps, as ``bench/attention.py``:

``prepare`` (any machine, no GPU): per case, the FP8 space's cost-model best structures and
the FlashAttention-3 design's neighbours, rendered for FP8; and the bf16 kernel the
attention suite found for the same shape (its winner in ``--bf16-results``), rendered.

``run`` (an H200): every FP8 candidate is checked against the fp32 reference of the same
inputs times their scales (the output's own bound) and quick-timed by the workers'
``LocalGpuPool``; the fastest correct one, the bf16 kernel and cuDNN's SDPA (on the inputs
widened to bf16 and scaled) are re-timed in the same worker, interleaved over
``--rounds`` rounds. Writes ``--out`` (device fingerprint, commit, per case: latencies, the
FP8 kernel's speed over the bf16 one's, its error, the schedule).

    .venv/bin/python bench/attention_fp8.py prepare --jobs 2 \\
        --bf16-results bench/results/attention-suite-bshd-2026-12-05.json \\
        --out .bench/attention-fp8.json.gz
    PYTHONPATH=. python3 bench/attention_fp8.py run --candidates .bench/attention-fp8.json.gz \\
        --out bench/results/attention-fp8-2026-12-05.json
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.attention import _candidates, case_name, flops  # noqa: E402
from bench.common import geomean, timing_configs, tree_state, write_json  # noqa: E402

FP8 = "float8_e4m3"
#: The suite's lengths the acceptance names.
LENGTHS = (4096, 8192)
#: The FlashAttention-3 design's neighbours an FP8 kernel is tried with.
FP8_NEIGHBOURS = {"warpgroups": ((128, 2),), "tile_kv": (128, 64),
                  "wg_schedule": ("free", "alternate"), "stages_k": (2, 3),
                  "persistent": (True,), "map_store": ("cuda_core", "tma")}


def fp8_cases(layout: str) -> list[dict[str, Any]]:
    """The suite's fp16 cases of :data:`LENGTHS`, as FP8 in ``layout``."""
    from scheduler_search.ops.suites import attention_suite

    return [{**p, "dtype": FP8, "layout": layout} for p in attention_suite()
            if p["dtype"] == "float16" and p["seq_q"] in LENGTHS]


def _bf16_winner(results: dict[str, Any], params: dict[str, Any]) -> dict[str, Any] | None:
    """The bf16 record of the suite results with ``params``' shape."""
    from scheduler_search.ops import parse_spec

    wanted = parse_spec("attention", {**params, "dtype": "bfloat16"}).params()
    return next((r for r in results["cases"] if r.get("params") == wanted and "choices" in r),
                None)


def _prepare_case(params: dict[str, Any], bf16: dict[str, Any] | None, top: int,
                  pool: int) -> dict[str, Any]:
    from codegen import render
    from scheduler_search.hardware import get_device
    from scheduler_search.ops import parse_spec
    from scheduler_search.sprogram import plan_sprogram

    device = get_device("h200")
    spec = parse_spec("attention", params)
    candidates = [{"source": source, "hash": sp.hash, "choices": sp.choices,
                   "artifact": render(sp, spec, device).to_dict()}
                  for source, sp in _candidates(spec, device, top, pool, FP8_NEIGHBOURS)]
    case: dict[str, Any] = {"params": spec.params(), "candidates": candidates}
    if bf16 is not None:
        bf16_spec = parse_spec("attention", bf16["params"])
        planned = plan_sprogram(bf16_spec, device, bf16["choices"])
        case["bf16"] = {"params": bf16_spec.params(), "hash": planned.hash,
                        "choices": planned.choices,
                        "artifact": render(planned, bf16_spec, device).to_dict()}
    return case


def prepare(args: argparse.Namespace) -> None:
    from concurrent.futures import ProcessPoolExecutor

    results = json.loads(Path(args.bf16_results).read_text())
    layout = results["cases"][0]["params"].get("layout", "bshd")
    wanted = fp8_cases(layout)
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as processes:
        futures = [processes.submit(_prepare_case, p, _bf16_winner(results, p), args.top,
                                    args.pool) for p in wanted]
        cases = []
        for params, future in zip(wanted, futures, strict=True):
            cases.append(future.result())
            print(f"{case_name(params)}: {len(cases[-1]['candidates'])} candidates, bf16 "
                  f"{'found' if 'bf16' in cases[-1] else 'missing'} "
                  f"({time.perf_counter() - started:.0f} s)", flush=True)
    doc = {**tree_state(), "bf16_results": args.bf16_results, "cases": cases}
    with gzip.open(args.out, "wt") as f:
        json.dump(doc, f)
    print(f"wrote {len(cases)} cases to {args.out}")


# ----- run (GPU) ----------------------------------------------------------------------
def _measure(pool: Any, params: dict[str, Any], artifacts: list[Any], timing: Any,
             deadline_s: float) -> list[Any]:
    from workers import Job

    workload = {"op": "attention", "params": params}
    return pool.measure([Job(workload, artifact=a, timing=timing, deadline_s=deadline_s)
                         for a in artifacts])


def _run_case(pool: Any, case: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    from codegen.artifact import KernelArtifact
    from workers import Job

    quick, final = timing_configs()
    params = case["params"]
    entries = case["candidates"][: args.top]
    measured = _measure(pool, params, [KernelArtifact.from_dict(e["artifact"]) for e in entries],
                        quick, args.deadline)
    tried = [{"source": e["source"], "hash": e["hash"], "choices": e["choices"],
              "status": m.status.value, "latency_us": m.latency_us, "rel_error": m.rel_error,
              "error": m.error[:300]} for e, m in zip(entries, measured, strict=True)]
    ok = [(t, e) for t, e in zip(tried, entries, strict=True) if t["status"] == "ok"]
    record: dict[str, Any] = {"case": case_name(params), "params": params, "searched": tried,
                              "candidates_ok": f"{len(ok)}/{len(tried)}"}
    if not ok or "bf16" not in case:
        return {**record, "error": "no correct FP8 candidate" if not ok else "no bf16 kernel"}
    best, entry = min(ok, key=lambda pair: pair[0]["latency_us"])
    fp8_job = Job({"op": "attention", "params": params},
                  artifact=KernelArtifact.from_dict(entry["artifact"]), timing=final,
                  deadline_s=args.deadline)
    bf16 = case["bf16"]
    bf16_job = Job({"op": "attention", "params": bf16["params"]},
                   artifact=KernelArtifact.from_dict(bf16["artifact"]), timing=final,
                   deadline_s=args.deadline)
    cudnn_job = Job({"op": "attention", "params": params}, baseline="sdpa_cudnn", timing=final,
                    deadline_s=args.deadline)
    rounds = [pool.measure([fp8_job, bf16_job, cudnn_job]) for _ in range(args.rounds)]
    failed = [m.status.value for r in rounds for m in r if m.status.value != "ok"]
    if failed:
        return {**record, "error": f"re-timing failed: {failed[:3]} {rounds[0][0].error[:300]}"}
    fp8_us, bf16_us, cudnn_us = (statistics.median(r[i].latency_us for r in rounds)
                                 for i in range(3))
    return {**record, "schedule_hash": best["hash"], "choices": best["choices"],
            "found_by": best["source"], "bf16_choices": bf16["choices"],
            "fp8_us": fp8_us, "bf16_us": bf16_us, "cudnn_bf16_us": cudnn_us,
            "vs_bf16": bf16_us / fp8_us, "vs_cudnn_bf16": cudnn_us / fp8_us,
            "fp8_tflops": flops(params) / fp8_us / 1e6,
            "rel_error": max(r[0].rel_error for r in rounds),
            "rounds_us": [[m.latency_us for m in r] for r in rounds]}


def run(args: argparse.Namespace) -> None:
    from scheduler_search.ops.attention import FP8_O_REL_ERROR_BOUND
    from workers import LocalGpuPool, ParallelCompiler

    with gzip.open(args.candidates, "rt") as f:
        doc = json.load(f)
    started = time.perf_counter()
    results = []
    with LocalGpuPool(compiler=ParallelCompiler(cache_dir=args.cache),
                      codegen_version="bench-attention-fp8") as pool:
        fingerprint = pool.fingerprints[0]
        for case in doc["cases"]:
            record = _run_case(pool, case, args)
            results.append(record)
            print(_line(record), f"({time.perf_counter() - started:.0f} s)", flush=True)
            measured = [r for r in results if "vs_bf16" in r]
            summary = {
                "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "suite": "attention-fp8", "fingerprint": fingerprint,
                "commit": doc.get("commit"), "tree_dirty_at_prepare": doc.get("dirty"),
                "bf16_results": doc.get("bf16_results"), "rounds": args.rounds,
                "o_rel_error_bound": FP8_O_REL_ERROR_BOUND,
                "geomean_vs_bf16": geomean([r["vs_bf16"] for r in measured]) if measured else None,
                "least_vs_bf16": min((r["vs_bf16"] for r in measured), default=None),
                "geomean_vs_cudnn_bf16": (geomean([r["vs_cudnn_bf16"] for r in measured])
                                          if measured else None),
                "cases_measured": len(measured), "cases": results,
                "wall_s": time.perf_counter() - started}
            write_json(args.out, summary)
    print(f"geomean FP8 vs pipetune bf16 {summary['geomean_vs_bf16']}, least "
          f"{summary['least_vs_bf16']}, vs cuDNN bf16 {summary['geomean_vs_cudnn_bf16']} over "
          f"{len(measured)} cases")


def _line(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"{r['case']:<34} {r['error']}"
    return (f"{r['case']:<34} fp8 {r['fp8_us']:9.1f} us {r['fp8_tflops']:6.1f} TF  bf16 "
            f"{r['bf16_us']:9.1f} us  cuDNN bf16 {r['cudnn_bf16_us']:9.1f} us  vs bf16 "
            f"{r['vs_bf16']:.3f}  vs cuDNN {r['vs_cudnn_bf16']:.3f}  error {r['rel_error']:.4f}"
            f"  ({r['candidates_ok']} ok)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--bf16-results", required=True,
                   help="an attention suite results file (its bf16 winners)")
    p.add_argument("--top", type=int, default=4, help="cost-model structures per case")
    p.add_argument("--pool", type=int, default=200, help="cost-model top N to pick from")
    p.add_argument("--jobs", type=int, default=1, help="cases ranked at once (processes)")
    p.add_argument("--out", default=".bench/attention-fp8.json.gz")
    r = sub.add_parser("run")
    r.add_argument("--candidates", default=".bench/attention-fp8.json.gz")
    r.add_argument("--top", type=int, default=1000, help="candidates measured per case")
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--deadline", type=float, default=30.0)
    r.add_argument("--cache", default="/tmp/pipetune-cubins")
    r.add_argument("--out", required=True)
    args = parser.parse_args()
    {"prepare": prepare, "run": run}[args.command](args)


if __name__ == "__main__":
    main()
