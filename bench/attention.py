"""The attention suite of docs/benchmarks.md: searched kernels against cuDNN's SDPA
(FlashAttention-3 class) and FlashAttention-2, on one GPU.

Two steps, so the GPU machine spends its time on GPU work only:

``prepare`` (any machine, no GPU): for every fp16 case (the suite, or ``--cases head-sizes``:
64, 96 and 256 at 4 x 32(8) x 4096; in each of ``--layouts``), the cost model's ``--top``
best schedules that differ in structure, plus the FlashAttention-3 design and its
neighbours (tile_kv, turns, stages, grid), each rendered for fp16 and bf16; one gzip JSON.

``run`` (an H200): every fp16 candidate is checked against the fp32 reference and timed
(quick timing) by the workers' ``LocalGpuPool``; the fastest correct one is kept, and the
bf16 case of the same shape uses its schedule. The kept kernel, cuDNN SDPA and
FlashAttention-2 SDPA (PyTorch, backend forced) are then re-timed in the same worker,
interleaved over ``--rounds`` rounds. Writes ``--out`` (device fingerprint, commit, per
case: latencies, ratios = peer latency / pipetune latency, the schedule) and prints the
table with the geometric means.

    .venv/bin/python bench/attention.py prepare --out .bench/attention-candidates.json.gz
    PYTHONPATH=. python3 bench/attention.py run --candidates .bench/attention-candidates.json.gz \\
        --out bench/results/attention-2026-11-30.json
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import itertools
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    build_design,
    geomean,
    rendered_per_dtype,
    timing_configs,
    tree_state,
    write_json,
)

#: Knobs whose values make two schedules "the same structure" for diversity.
STRUCTURE_KEYS = ("tile_q", "tile_kv", "warp_specialized", "consumer_warpgroups",
                  "consumer_split", "wg_schedule", "order", "persistent")
#: The FlashAttention-3 design's neighbours worth measuring on every shape.
NEIGHBOURS = {"warpgroups": ((128, 2), (192, 3)), "tile_kv": (64, 128),
              "wg_schedule": ("free", "alternate"), "stages_k": (2, 3),
              "persistent": (True, False), "map_store": ("cuda_core", "tma")}
PEERS = ("sdpa_cudnn", "sdpa_flash")
#: Timed beside them where it runs (the flash-attn-4 wheel with nvidia-cutlass-dsl on the
#: path); each case says whether it ran and, if not, why.
OPTIONAL_PEERS = ("flash_attn_4",)


def case_name(params: dict[str, Any]) -> str:
    """``1x32(8)x2048xd128-causal-floa``: batch x heads(kv heads) x lengths x head_dim
    (``-bhsd`` after it in PyTorch's layout)."""
    p = params
    heads = f"{p['heads']}({p['kv_heads']})" if p["kv_heads"] != p["heads"] else str(p["heads"])
    lengths = str(p["seq_q"]) if p["seq_q"] == p["seq_kv"] else f"{p['seq_q']}x{p['seq_kv']}"
    layout = "-bhsd" if p.get("layout", "bshd") == "bhsd" else ""
    dtype = "fp8" if p["dtype"].startswith("float8") else p["dtype"][:4]
    return (f"{p['batch']}x{heads}x{lengths}xd{p['head_dim']}{'-causal' if p['causal'] else ''}"
            f"-{dtype}{layout}")


def flops(params: dict[str, Any]) -> float:
    """Two matrix products per head; a causal mask halves the work (as FlashAttention counts)."""
    p = params
    full = 4.0 * p["batch"] * p["heads"] * p["seq_q"] * p["seq_kv"] * p["head_dim"]
    return full / 2 if p["causal"] else full


# ----- prepare (CPU) ------------------------------------------------------------------
def _design_neighbours(space: Any, neighbours: dict[str, tuple] = NEIGHBOURS) -> list[Any]:
    from scheduler_search.space.designs import FLASH_ATTENTION_3

    base = {**FLASH_ATTENTION_3, "map_softmax_exp2": "sfu", "raster_major": "q",
            "raster_swizzle": 1}
    built = []
    for values in itertools.product(*neighbours.values()):
        choices = {**base, **dict(zip(neighbours, values, strict=True))}
        choices["tile_q"], choices["consumer_warpgroups"] = choices.pop("warpgroups")
        choices["stages_v"] = choices["stages_k"]
        sprogram = build_design(space, choices)
        if sprogram is not None and sprogram.hash not in {b.hash for b in built}:
            built.append(sprogram)
    return built


def _candidates(spec: Any, device: Any, top: int, pool: int,
                neighbours: dict[str, tuple] = NEIGHBOURS) -> list[tuple[str, Any]]:
    from codegen import feasibility
    from scheduler_search.space import ScheduleSpace, rank_top

    space = ScheduleSpace(spec, device, feasibility("attention", device))
    candidates, _ = space.enumerate()
    chosen: list[tuple[str, Any]] = []
    seen: set[tuple] = set()
    for item in rank_top(space, candidates, pool):
        key = tuple(item.sprogram.choices.get(k) for k in STRUCTURE_KEYS)
        if key not in seen and len(chosen) < top:
            seen.add(key)
            chosen.append(("cost model", item.sprogram))
    hashes = {sp.hash for _, sp in chosen}
    designs = _design_neighbours(space, neighbours)
    chosen += [("fa3 design", sp) for sp in designs if sp.hash not in hashes]
    if spec.params()["causal"]:
        chosen += _heaviest_first(space, designs, {sp.hash for _, sp in chosen})
    return chosen


def _heaviest_first(space: Any, designs: list[Any], hashes: set[str]) -> list[tuple[str, Any]]:
    """Causal cases: the persistent design variants again, their heaviest tiles (the
    diagonal's far end, across batch and heads) first, so the short ones fill the last
    wave."""
    twins = []
    for sp in designs:
        if not sp.choices.get("persistent"):
            continue
        twin, validity = space.build({**sp.choices, "raster_heaviest_first": True})
        if validity.ok and twin.hash not in hashes:
            hashes.add(twin.hash)
            twins.append(("fa3 design, heaviest first", twin))
    return twins


#: FlashAttention-3's head sizes besides 128, at one long shape (docs/benchmarks.md).
HEAD_SIZES = (64, 96, 256)


def head_size_cases() -> list[dict[str, Any]]:
    """Head sizes 64, 96 and 256 at batch 4, 32 query heads over 8, sequence 4096, causal
    and not (fp16; ``run`` times bf16 on the same schedule)."""
    return [{"batch": 4, "heads": 32, "kv_heads": 8, "seq_q": 4096, "seq_kv": 4096,
             "head_dim": d, "causal": causal, "dtype": "float16"}
            for d in HEAD_SIZES for causal in (False, True)]


def prepared_cases(which: str, layouts: list[str]) -> list[dict[str, Any]]:
    """The fp16 cases of ``which`` (``suite`` or ``head-sizes``) in each of ``layouts``."""
    from scheduler_search.ops.suites import attention_suite

    base = ([p for p in attention_suite() if p["dtype"] == "float16"] if which == "suite"
            else head_size_cases())
    return [{**params, "layout": layout} for layout in layouts for params in base]


def _prepare_case(params: dict[str, Any], device_name: str, top: int,
                  pool: int) -> dict[str, Any]:
    """One case's candidates, rendered in fp16 and bf16 (a process of its own with
    ``--jobs``: ranking a space is one core's work)."""
    from scheduler_search.hardware import get_device
    from scheduler_search.ops import parse_spec

    device = get_device(device_name)
    specs = {d: parse_spec("attention", {**params, "dtype": d}) for d in ("float16", "bfloat16")}
    entries = [rendered_per_dtype(source, sprogram, specs, device)
               for source, sprogram in _candidates(specs["float16"], device, top, pool)]
    return {"params": specs["float16"].params(), "candidates": entries}


def prepare(args: argparse.Namespace) -> None:
    from concurrent.futures import ProcessPoolExecutor

    started = time.perf_counter()
    wanted = prepared_cases(args.cases, args.layouts)
    with ProcessPoolExecutor(max_workers=args.jobs) as processes:
        futures = [processes.submit(_prepare_case, params, args.device, args.top, args.pool)
                   for params in wanted]
        cases = []
        for params, future in zip(wanted, futures, strict=True):
            cases.append(future.result())
            print(f"{case_name(params)}: {len(cases[-1]['candidates'])} candidates "
                  f"({time.perf_counter() - started:.0f} s)", flush=True)
    doc = {**tree_state(), "device": args.device, "top": args.top, "pool": args.pool,
           "cases": cases}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(out, "wt") as f:
        json.dump(doc, f)
    print(f"wrote {len(cases)} cases, {sum(len(c['candidates']) for c in cases)} candidates "
          f"to {out}")


# ----- run (GPU) ----------------------------------------------------------------------
def _artifact(entry: dict[str, Any], params: dict[str, Any], rerender: bool,
              device_name: str = "h200", op: str = "attention") -> Any:
    """The candidate's kernel: as prepared, or rendered again from its choices by this
    tree's code generation (the ranking is kept; the text is today's)."""
    from codegen import render
    from codegen.artifact import KernelArtifact
    from scheduler_search.hardware import get_device
    from scheduler_search.ops import parse_spec
    from scheduler_search.sprogram import plan_sprogram

    prepared = entry[params["dtype"]]
    if not rerender:
        return KernelArtifact.from_dict(prepared["artifact"])
    device = get_device(device_name)  # the candidates file's (``h200@sm_80``: Ampere code)
    spec = parse_spec(op, params)
    return render(plan_sprogram(spec, device, prepared["choices"]), spec, device)


def _search(pool: Any, case: dict[str, Any], quick: Any, args: argparse.Namespace,
            op: str = "attention", limit: int | None = None) -> list[dict]:
    """Check and quick-time the fp16 candidates of a case of ``op``: the first ``limit``
    (``run --top`` cuts a prepared file short), or all of them."""
    from workers import Job

    workload = {"op": op, "params": case["params"]}
    entries = case["candidates"][:limit]
    measured = pool.measure([
        Job(workload, artifact=_artifact(e, case["params"], args.rerender,
                                    args.device, op), timing=quick,
            deadline_s=args.deadline) for e in entries])
    return [{"source": e["source"], "hash": e["float16"]["hash"], "status": m.status.value,
             "latency_us": m.latency_us, "rel_error": m.rel_error, "registers": m.registers,
             "error": m.error[:300], "choices": e["float16"]["choices"], "entry": e}
            for e, m in zip(entries, measured, strict=True)]


def _retime(pool: Any, params: dict[str, Any], artifact: Any, final: Any,
            args: argparse.Namespace, op: str = "attention",
            required_peers: tuple[str, str] = PEERS,
            optional_peers: tuple[str, ...] = OPTIONAL_PEERS) -> dict[str, Any]:
    """The kernel and the peers (cuDNN's, then FlashAttention-2's) in the same worker,
    interleaved over the rounds: medians (an optional peer that cannot run is reported, not
    a failure). ``flops`` of the forward; the backward's records scale it themselves."""
    from workers import Job

    workload = {"op": op, "params": params}
    peers = (*required_peers, *optional_peers)
    rounds = []
    for _ in range(args.rounds):
        jobs = [Job(workload, artifact=artifact, timing=final, deadline_s=args.deadline)]
        jobs += [Job(workload, baseline=p, timing=final, deadline_s=args.deadline) for p in peers]
        rounds.append(pool.measure(jobs))
    required = 1 + len(required_peers)
    failed = [m.status.value for r in rounds for m in r[:required] if m.status.value != "ok"]
    if failed:
        return {"error": f"re-timing failed: {failed[:3]} {rounds[0][0].error[:300]}"}
    mine, cudnn, fa2 = (statistics.median(r[i].latency_us for r in rounds)
                        for i in range(required))
    record = {"pipetune_us": mine, "cudnn_us": cudnn, "fa2_us": fa2,
              "vs_cudnn": cudnn / mine, "vs_fa2": fa2 / mine,
              "pipetune_tflops": flops(params) / mine / 1e6,
              "cudnn_tflops": flops(params) / cudnn / 1e6,
              "rel_error": max(r[0].rel_error for r in rounds),
              "rounds_us": [[m.latency_us for m in r] for r in rounds]}
    for offset, peer in enumerate(optional_peers, start=required):
        runs = [r[offset] for r in rounds]
        if all(m.status.value == "ok" for m in runs):
            us = statistics.median(m.latency_us for m in runs)
            record[peer] = {"ran": True, "us": us, "speedup": us / mine,
                            "rel_error": max(m.rel_error for m in runs)}
        else:
            record[peer] = {"ran": False, "why": runs[0].error[:300]}
    return record


def run(args: argparse.Namespace) -> None:
    from workers import LocalGpuPool, ParallelCompiler

    with gzip.open(args.candidates, "rt") as f:
        doc = json.load(f)
    args.device = doc.get("device", "h200")  # what the candidates were planned for
    cases = [c for c in doc["cases"]
             if not args.only or any(case_name(c["params"]).startswith(s) for s in args.only)]
    quick, final = timing_configs()
    results: list[dict[str, Any]] = []
    started = time.perf_counter()
    with LocalGpuPool(compiler=ParallelCompiler(cache_dir=args.cache),
                      codegen_version="bench-attention") as pool:
        fingerprint = pool.fingerprints[0]
        for case in cases:
            tried = _search(pool, case, quick, args, limit=args.top)
            ok = [t for t in tried if t["status"] == "ok"]
            searched = case_name(case["params"])
            if not ok:
                results.append({"case": searched, "params": case["params"],
                                "searched": [{k: v for k, v in t.items() if k != "entry"}
                                             for t in tried],
                                "error": "no candidate was correct"})
                print(f"{searched}: no correct candidate", flush=True)
                continue
            best = min(ok, key=lambda t: t["latency_us"])
            for dtype in args.dtypes:
                params = {**case["params"], "dtype": dtype}
                artifact = _artifact(best["entry"], params, args.rerender, args.device)
                record = {"case": case_name(params), "params": params,
                          "schedule_hash": best["entry"][dtype]["hash"],
                          "choices": best["choices"], "found_by": best["source"],
                          "candidates_ok": f"{len(ok)}/{len(tried)}",
                          **_retime(pool, params, artifact, final, args)}
                if dtype == "float16":
                    record["searched"] = [{k: v for k, v in t.items() if k != "entry"}
                                          for t in tried]
                results.append(record)
                _print_case(record, started)
            write_json(args.out, _summary(args, doc, quick, final, fingerprint, results,
                                          started))
    summary = _summary(args, doc, quick, final, fingerprint, results, started)
    write_json(args.out, summary)
    print_table(summary)


def _print_case(r: dict[str, Any], started: float) -> None:
    if "error" in r:
        print(f"{r['case']}: {r['error']}", flush=True)
        return
    print(f"{r['case']:<34} pipetune {r['pipetune_us']:9.1f} us {r['pipetune_tflops']:6.1f} TF"
          f"  cuDNN {r['cudnn_us']:9.1f} us  FA2 {r['fa2_us']:9.1f} us  vs cuDNN "
          f"{r['vs_cudnn']:.3f}  vs FA2 {r['vs_fa2']:.3f}{_optional(r)}  ({r['candidates_ok']} "
          f"ok, {time.perf_counter() - started:.0f} s)", flush=True)


def _optional(r: dict[str, Any]) -> str:
    """The optional peers that ran on a case, as table text."""
    return "".join(f"  {peer} {r[peer]['us']:.1f} us vs {r[peer]['speedup']:.3f}"
                   for peer in OPTIONAL_PEERS if r.get(peer, {}).get("ran"))


def _summary(args: argparse.Namespace, doc: dict[str, Any], quick: Any, final: Any,
             fingerprint: Any, results: list[dict[str, Any]], started: float) -> dict[str, Any]:
    measured = [r for r in results if "vs_cudnn" in r]
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "suite": "attention", "peers": list(PEERS), "fingerprint": fingerprint,
        "optional_peers": {peer: _ran(measured, peer) for peer in OPTIONAL_PEERS},
        "commit": doc.get("commit"), "tree_dirty_at_prepare": doc.get("dirty"),
        "rerendered": args.rerender, "codegen_version": _codegen_version(),
        "search": {"method": "fp16: the cost model's top distinct structures plus the "
                             "FlashAttention-3 design's neighbours, each checked against the "
                             "fp32 reference and timed; bf16 reuses the fp16 winner",
                   "top": args.top, "pool": doc.get("pool"), "quick_timing": quick.to_dict()},
        "final_timing": final.to_dict(), "rounds": args.rounds,
        "geomean_vs_cudnn": geomean([r["vs_cudnn"] for r in measured]),
        "geomean_vs_fa2": geomean([r["vs_fa2"] for r in measured]),
        "cases_measured": len(measured), "cases": results,
        "wall_s": time.perf_counter() - started,
    }


def _ran(measured: list[dict[str, Any]], peer: str) -> dict[str, Any]:
    """Whether an optional peer ran: on how many cases, its geometric-mean speedup of
    pipetune over it there, and why it did not run where it did not."""
    ran = [r[peer]["speedup"] for r in measured if r.get(peer, {}).get("ran")]
    why = sorted({r[peer]["why"] for r in measured if r.get(peer) and not r[peer]["ran"]})
    return {"cases_ran": len(ran), "geomean_vs": geomean(ran) if ran else None,
            "why_not": why[:3]}


def _codegen_version() -> str:
    from codegen import codegen_version

    return codegen_version()


def describe_forward(c: dict[str, Any]) -> str:
    """A forward schedule's choices, as the table's last column."""
    return (f"{c['tile_q']}x{c['tile_kv']} {c['order']} wg{c['consumer_warpgroups']} "
            f"{c.get('wg_schedule', 'free')} s{c['stages_k']}/{c['stages_v']} "
            f"{'pers' if c['persistent'] else 'grid'} {c.get('consumer_split', 'cooperative')}"
            f" store:{c.get('map_store', 'cuda_core')}"
            f"{' heaviest-first' if c.get('raster_heaviest_first') else ''}")


def print_table(summary: dict[str, Any],
                describe: Callable[[dict[str, Any]], str] = describe_forward) -> None:
    print(f"\n{'case':<34} {'pipetune us':>12} {'cuDNN us':>10} {'FA2 us':>10} {'vs cuDNN':>9} "
          f"{'vs FA2':>7}  schedule")
    for r in summary["cases"]:
        if "vs_cudnn" not in r:
            print(f"{r['case']:<34} {r.get('error', '')}")
            continue
        print(f"{r['case']:<34} {r['pipetune_us']:>12.1f} {r['cudnn_us']:>10.1f} "
              f"{r['fa2_us']:>10.1f} {r['vs_cudnn']:>9.3f} {r['vs_fa2']:>7.3f}  "
              f"{describe(r['choices'])}")
    print(f"geomean vs cuDNN SDPA {summary['geomean_vs_cudnn']:.3f}, vs FlashAttention-2 "
          f"{summary['geomean_vs_fa2']:.3f} over {summary['cases_measured']} cases")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare", help="rank and render candidates (CPU)")
    p.add_argument("--device", default="h200")
    p.add_argument("--top", type=int, default=8, help="cost-model structures per case")
    p.add_argument("--pool", type=int, default=200, help="cost-model top N to pick from")
    p.add_argument("--jobs", type=int, default=1, help="cases ranked at once (processes)")
    p.add_argument("--out", default=str(ROOT / ".bench" / "attention-candidates.json.gz"))
    p.add_argument("--cases", choices=("suite", "head-sizes"), default="suite",
                   help="the suite, or head sizes 64 / 96 / 256 at 4 x 32(8) x 4096")
    p.add_argument("--layouts", nargs="+", choices=("bshd", "bhsd"), default=["bshd"])
    r = sub.add_parser("run", help="search and benchmark on the GPU")
    r.add_argument("--candidates", default=str(ROOT / ".bench" / "attention-candidates.json.gz"))
    r.add_argument("--top", type=int, default=1000, help="candidates measured per case")
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--deadline", type=float, default=30.0)
    r.add_argument("--only", nargs="*", default=[])
    r.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"])
    r.add_argument("--cache", default="/tmp/pipetune-cubins")
    r.add_argument("--rerender", action="store_true",
                   help="render the candidates' choices with this tree's code generation")
    r.add_argument("--out", default=str(ROOT / "bench" / "results" / "attention.json"))
    args = parser.parse_args(argv)
    prepare(args) if args.step == "prepare" else run(args)


if __name__ == "__main__":
    main()
