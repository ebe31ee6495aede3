"""The GEMM suites of docs/benchmarks.md: pipetune's searched kernels against cuBLAS, and
GEMMs with a fused epilogue against cuBLASLt's and the unfused PyTorch sequence, on one GPU.

``--epilogue`` picks the suite: ``plain`` (peer cuBLAS), or the spec's epilogue fused into
the kernel (docs/benchmarks.md): ``bias_gelu`` (bias + tanh GELU, cuBLASLt's GELU) against
cuBLASLt's own fused epilogue, ``torch._addmm_activation(bias, a, b, use_gelu=True)``, the
call a user would otherwise make, with the unfused sequence (``torch.matmul`` then one
PyTorch op per step) beside it; ``bias_residual`` and ``bias_gelu_erf`` (the exact GELU),
which no cuBLASLt call computes whole, against the unfused sequence, with cuBLASLt's
fused bias then PyTorch's ops for the rest beside it (``workers.baselines`` says why).
Each case reports its ratio against both, the summary the geometric mean against each
and the issue's floor (:data:`EPILOGUE_FLOORS`). ``prepare --dtypes float8_e4m3
--layouts nk`` is the FP8 suite (per-tensor scales, bf16 out; peer ``torch._scaled_mm``).

Two steps, so the GPU machine spends its time on GPU work only:

``prepare`` (any machine, no GPU): for every suite shape x B layout, rank the fp16
schedule space with the cost model and keep the ``--top`` best that differ in structure
(tile shape, warp roles, split, grid, epilogue: the cost model scores many near-copies
alike); for the ``--raster-top`` best of those, add the tile orders the cost model cannot
tell apart (raster major m / n x swizzle 4, 8, 16); then the ``--cross`` best structures
of every other shape of the same layout that are valid here (the service's warm start
from its cached neighbours does the same), and the hand-written designs in every tile
order (the service's first batch). Each candidate is rendered for every
``--dtypes``; all go to one gzip JSON file.

``run`` (an H200): measure every candidate of the first input type with the workers'
``LocalGpuPool`` (NVRTC compiles in parallel on the CPU cores; each kernel is checked
against the fp32 reference before it is timed; quick timing). The ``--leaders`` fastest
are then re-timed by the final method (warm-up, L2 flush, CUDA events, median) with the
peers (the spec's run baseline, e.g. the workers' ``cublas``: ``torch.matmul``, and its
further peers) in the same worker process, interleaved over ``--rounds`` rounds, for
each input type (bf16 re-times the fp16 leaders), and the fastest leader is the case's
kernel, as the service re-times its leaders. Writes ``--out`` (device fingerprint,
commit, every case: latencies, ratio = peer latency / pipetune latency against the run
baseline and against every peer, the schedule) and prints the table with the geometric
means.

    .venv/bin/python bench/gemm.py prepare --top 24 --out .bench/gemm-candidates.json.gz
    PYTHONPATH=. python3 bench/gemm.py run --candidates .bench/gemm-candidates.json.gz \\
        --out bench/results/gemm-2026-11-29.json
    .venv/bin/python bench/gemm.py prepare --epilogue bias_gelu --out .bench/gemm-gelu.json.gz
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

from bench.common import (  # noqa: E402
    build_design,
    geomean,
    timing_configs,
    tree_state,
    write_json,
)
from service.commands.options import knob_value  # noqa: E402

#: Knobs whose values make two schedules "the same structure" for diversity.
STRUCTURE_KEYS = (
    "tile_m",
    "tile_n",
    "tile_k",
    "warp_specialized",
    "consumer_warpgroups",
    "consumer_split",
    "persistent",
    "map_store",
    "cluster_size",
    "cluster_axis",
    "stream_k",
)


#: Suite -> the epilogue fused into every case's kernel (docs/benchmarks.md: bias + GELU
#: is the tanh GELU that cuBLASLt fuses; ``bias_gelu_erf`` the exact one, as PyTorch's
#: default ``F.gelu``, which the suite ran before 2026-12-04).
EPILOGUES: dict[str, dict[str, Any]] = {
    "plain": {},
    "bias_gelu": {"bias": True, "act": "gelu_tanh"},
    "bias_gelu_erf": {"bias": True, "act": "gelu"},
    "bias_residual": {"bias": True, "residual": True},
}

#: The epilogue suites' floors by the peer that counts (issue 44, item 5): a geometric mean
#: of at least 1.0 against cuBLASLt's fused epilogue where it computes the epilogue whole,
#: 1.15 against the unfused sequence where it does not.
EPILOGUE_FLOORS = {"cublaslt_epilogue": 1.0, "torch_epilogue": 1.15}


def _case_name(params: dict[str, Any]) -> str:
    return (
        f"{params['m']}x{params['n']}x{params['k']}-{params['dtype'][0:4]}-{params['b_layout']}"
    )


def _spec(m: int, n: int, k: int, dtype: str, layout: str, epilogue: str) -> Any:
    from scheduler_search.ops.gemm import GemmSpec

    return GemmSpec(m=m, n=n, k=k, dtype=dtype, b_layout=layout, epilogue=EPILOGUES[epilogue])


def _structure(choices: dict[str, Any]) -> tuple:
    return tuple(choices.get(k) for k in STRUCTURE_KEYS)


# ----- prepare (CPU) ------------------------------------------------------------------
def _distinct_top(ranked: list[Any], top: int) -> list[Any]:
    """The first ``top`` of ``ranked`` that differ in structure."""
    chosen, seen = [], set()
    for item in ranked:
        key = _structure(item.sprogram.choices)
        if key not in seen:
            seen.add(key)
            chosen.append(item)
        if len(chosen) == top:
            break
    return chosen


def _tried(space: Any, chosen: list[Any], borrowed: list[dict[str, Any]],
           raster_top: int) -> list[tuple[int | None, dict[str, Any], float | None, str]]:
    """(cost-model rank or None, choices, estimate, source) of every candidate of one case:
    its own distinct structures (``ranked``), the raster orders (``raster``), clusters
    (``cluster``) and stream-K shares (``stream-k``) of the best few, the hand-written
    designs (``design``) in each loop order, raster and stream-K share, then the
    structures borrowed from the other shapes that are valid here (``borrowed``, as the
    service's warm start from cached neighbours): the cost model scores each shape alone
    and can miss a structure that a neighbouring shape's ranking finds."""
    from scheduler_search.search.seeding import cluster_twins, stream_k_twins
    from scheduler_search.space.designs import DESIGNS

    rasters = [{"raster_major": major, "raster_swizzle": swizzle}
               for major in ("m", "n") for swizzle in (4, 8, 16)]
    tried = [(rank, item.sprogram.choices, item.estimate.latency_us, "ranked")
             for rank, item in enumerate(chosen)]
    for rank, item in enumerate(chosen[:raster_top]):
        for order in rasters:
            choices = {**item.sprogram.choices, **order}
            if choices != item.sprogram.choices:
                tried.append((rank, choices, None, "raster"))
    seen = {_structure(c) for _, c, _, _ in tried}
    # The best structures alone and in each cluster, as the service seeds them: the cost
    # model's credit for a multicast tile is an estimate, the GPU decides.
    for rank, item in enumerate(chosen[:raster_top]):
        for twin in cluster_twins(space, item.sprogram.choices):
            if _structure(twin) not in seen:
                seen.add(_structure(twin))
                tried.append((rank, twin, None, "cluster"))
        for twin in stream_k_twins(space, item.sprogram.choices):
            if _structure(twin) not in seen:
                seen.add(_structure(twin))
                tried.append((rank, twin, None, "stream-k"))
    # The hand-written designs in every tile order, as the service measures them in its
    # first batch: the cost model may rank them low, and on large shapes the raster is
    # worth 10% (8192x14336x4096 kn, 2026-12-02: the design at raster n / 8, 1324 us; the
    # bench's best, all in raster m / 1, 1514 us).
    # Each in both loop orders: on 4000x6000x2000 fp16 kn the service's tune found the
    # design serial at 0.959 of cuBLAS, the bench's best (overlapped) ran at 0.943.
    designs = [{**design, "order": loop} for design in DESIGNS["gemm"].values()
               for loop in ("overlap", "serial")]
    for design in designs:
        for order in ({}, *rasters):
            for choices in ({**design, **order}, *stream_k_twins(space, {**design, **order})):
                new = all(choices != c for _, c, _, _ in tried)
                if new and build_design(space, choices) is not None:
                    tried.append((None, choices, None, "design"))
                    seen.add(_structure(choices))
    for choices in borrowed:
        if _structure(choices) in seen:
            continue
        seen.add(_structure(choices))
        if build_design(space, choices) is not None:
            tried.append((None, choices, None, "borrowed"))
    return tried


def prepare(args: argparse.Namespace) -> None:
    from codegen import feasibility, render
    from scheduler_search.hardware import get_device
    from scheduler_search.ops.suites import GEMM_SHAPES
    from scheduler_search.space import ScheduleSpace, rank_top
    from scheduler_search.sprogram import plan_sprogram

    device = get_device(args.device)
    started = time.perf_counter()
    shapes = [s for s in GEMM_SHAPES if not args.shapes or "x".join(map(str, s)) in args.shapes]
    ranked_cases = []
    for m, n, k in shapes:
        for layout in args.layouts:
            spec = _spec(m, n, k, args.dtypes[0], layout, args.epilogue)
            space = ScheduleSpace(spec, device, feasibility("gemm", device), fixed=dict(args.fix))
            candidates, _ = space.enumerate()
            chosen = _distinct_top(rank_top(space, candidates, args.pool), args.top)
            ranked_cases.append(((m, n, k), layout, space, chosen))
            print(f"{m}x{n}x{k} {layout}: {len(candidates)} structural candidates, "
                  f"{len(chosen)} kept ({time.perf_counter() - started:.0f} s)", flush=True)
    cases = []
    for shape, layout, space, chosen in ranked_cases:
        borrowed = [item.sprogram.choices for other, other_layout, _, other_chosen in ranked_cases
                    if other != shape and other_layout == layout
                    for item in other_chosen[: args.cross]]
        specs = {dtype: _spec(*shape, dtype, layout, args.epilogue) for dtype in args.dtypes}
        entries = []
        for rank, choices, estimate_us, source in _tried(space, chosen, borrowed,
                                                         args.raster_top):
            entry: dict[str, Any] = {"rank": rank, "estimate_us": estimate_us,
                                     "source": source}
            for dtype, spec in specs.items():
                sprogram = plan_sprogram(spec, device, choices)
                entry[dtype] = {"hash": sprogram.hash, "choices": sprogram.choices,
                                "artifact": render(sprogram, spec, device).to_dict()}
            entries.append(entry)
        cases.append({"params": specs[args.dtypes[0]].params(), "candidates": entries})
    doc = {**tree_state(), "device": args.device, "epilogue": args.epilogue, "top": args.top,
           "raster_top": args.raster_top, "cross": args.cross, "pool": args.pool,
           "cases": cases}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(out, "wt") as f:
        json.dump(doc, f)
    total = sum(len(c["candidates"]) for c in cases)
    print(f"wrote {len(cases)} cases, {total} candidates to {out} "
          f"({time.perf_counter() - started:.0f} s)")


# ----- run (GPU) ----------------------------------------------------------------------
def run(args: argparse.Namespace) -> None:
    from codegen.artifact import KernelArtifact
    from workers import Job, LocalGpuPool, ParallelCompiler

    with gzip.open(args.candidates, "rt") as f:
        doc = json.load(f)
    cases = doc["cases"]
    if args.only:
        cases = [c for c in cases if any(s in _case_name(c["params"]) for s in args.only)]
    quick, final = timing_configs()
    results: list[dict[str, Any]] = []
    started = time.perf_counter()
    compiler = ParallelCompiler(cache_dir=args.cache)
    with LocalGpuPool(compiler=compiler, codegen_version="bench-gemm") as pool:
        fingerprint = pool.fingerprints[0]
        for case in cases:
            searched = case["params"]
            searched_dtype = searched["dtype"]
            workload = {"op": "gemm", "params": searched}
            entries = case["candidates"][: args.top]
            jobs = [
                Job(
                    workload,
                    artifact=KernelArtifact.from_dict(e[searched_dtype]["artifact"]),
                    timing=quick,
                    deadline_s=args.deadline,
                )
                for e in entries
            ]
            measured = pool.measure(jobs)
            tried = []
            for entry, result in zip(entries, measured, strict=True):
                tried.append(
                    {
                        "rank": entry["rank"],
                        "hash": entry[searched_dtype]["hash"],
                        "status": result.status.value,
                        "latency_us": result.latency_us,
                        "rel_error": result.rel_error,
                        "registers": result.registers,
                        "spill_bytes": result.spill_bytes,
                        "error": result.error[:300],
                        "estimate_us": entry["estimate_us"],
                        "choices": entry[searched_dtype]["choices"],
                    }
                )
            ok = [t for t in tried if t["status"] == "ok"]
            if not ok:
                results.append({"case": _case_name(searched), "params": searched,
                                "searched": tried, "error": "no candidate was correct"})
                print(f"{_case_name(searched)}: no correct candidate", flush=True)
                continue
            leaders = sorted(ok, key=lambda t: t["latency_us"])[: args.leaders]
            by_hash = {e[searched_dtype]["hash"]: e for e in entries}
            rendered = [d for d in entries[0] if d not in ("rank", "estimate_us", "source")]
            for dtype in args.dtypes or rendered:
                params = {**searched, "dtype": dtype}
                kept = [by_hash[t["hash"]][dtype] for t in leaders]
                retimed = _retime(pool, params, kept, final, args)
                best = leaders[retimed.get("leader_kept", 0)]
                record = {"case": _case_name(params), "params": params,
                          **({"searched": tried} if dtype == searched_dtype
                             else {"searched_as": _case_name(searched)}),
                          **retimed,
                          "cost_model_rank": best["rank"],
                          "candidates_ok": f"{len(ok)}/{len(tried)}"}
                results.append(record)
                _print_case(record, started)
            write_json(args.out, _summary(args, doc, quick, final, fingerprint, results, started))
    summary = _summary(args, doc, quick, final, fingerprint, results, started)
    write_json(args.out, summary)
    print_table(summary)


def _retime(pool: Any, params: dict[str, Any], leaders: list[dict[str, Any]], final: Any,
            args: argparse.Namespace) -> dict[str, Any]:
    """The leaders of the quick timing and the spec's peers in the same worker, interleaved
    over the rounds (the final method, as the service re-times its leaders): the fastest
    leader's median is pipetune's, ``ratio`` is against the run baseline (``peer``)."""
    from codegen.artifact import KernelArtifact
    from scheduler_search.ops import parse_spec
    from workers import Job

    spec = parse_spec("gemm", params)
    peers = list(dict.fromkeys([args.peer or spec.run_baseline(), *spec.run_peers()]))
    workload = {"op": "gemm", "params": params}
    kernels = [Job(workload, artifact=KernelArtifact.from_dict(leader["artifact"]),
                   timing=final, deadline_s=args.deadline) for leader in leaders]
    baselines = [Job(workload, baseline=peer, timing=final, deadline_s=args.deadline)
                 for peer in peers]
    rounds = [pool.measure([*kernels, *baselines]) for _ in range(args.rounds)]
    medians = {i: statistics.median(r[i].latency_us for r in rounds)
               for i in range(len(leaders)) if all(r[i].status.value == "ok" for r in rounds)}
    if not medians:
        return {"error": f"re-timing failed: {[r[0].status.value for r in rounds]}"}
    fastest = min(medians, key=medians.get)
    winner, mine_us = leaders[fastest], medians[fastest]
    base = len(leaders)
    peer_us = {name: statistics.median(r[base + i].latency_us for r in rounds)
               for i, name in enumerate(peers)
               if all(r[base + i].status.value == "ok" for r in rounds)}
    flops = spec.flops()
    record: dict[str, Any] = {
        "pipetune_us": mine_us, "pipetune_tflops": flops / mine_us / 1e6, "peer": peers[0],
        "peers_us": peer_us, "ratios_vs_peers": {n: us / mine_us for n, us in peer_us.items()},
        "rel_error": max(r[fastest].rel_error for r in rounds),
        "peer_errors": {name: r[base + i].error[:200] for r in rounds
                        for i, name in enumerate(peers) if r[base + i].status.value != "ok"},
        "leaders_us": [medians.get(i) for i in range(len(leaders))],
        "leader_kept": fastest,
        "rounds_us": [[m.latency_us for m in r] for r in rounds],
        "schedule_hash": winner["hash"], "choices": winner["choices"]}
    if peers[0] in peer_us:
        record.update(peer_us=peer_us[peers[0]], ratio=peer_us[peers[0]] / mine_us,
                      peer_tflops=flops / peer_us[peers[0]] / 1e6)
    return record


def _print_case(r: dict[str, Any], started: float) -> None:
    if "pipetune_us" not in r:
        print(f"{r['case']}: {r['error']}", flush=True)
        return
    peers = "  ".join(f"{n} {us:9.1f} us ({r['ratios_vs_peers'][n]:.3f})"
                      for n, us in r["peers_us"].items())
    ratio = f"ratio {r['ratio']:.3f}" if "ratio" in r else f"no {r['peer']}"
    print(f"{r['case']:<28} pipetune {r['pipetune_us']:9.1f} us {r['pipetune_tflops']:6.1f} TF  "
          f"{peers}  {ratio}  ({r['candidates_ok']} ok, {time.perf_counter() - started:.0f} s)",
          flush=True)


def _summary(
    args: argparse.Namespace,
    doc: dict[str, Any],
    quick: Any,
    final: Any,
    fingerprint: Any,
    results: list[dict[str, Any]],
    started: float,
) -> dict[str, Any]:
    ratios = [r["ratio"] for r in results if "ratio" in r]
    epilogue = doc.get("epilogue", "plain")
    by_peer: dict[str, list[float]] = {}
    for r in results:
        for name, ratio in r.get("ratios_vs_peers", {}).items():
            by_peer.setdefault(name, []).append(ratio)
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "suite": "gemm" if epilogue == "plain" else f"gemm+{epilogue}",
        # As prepared (a file from before bias_gelu meant tanh GELU says erf).
        "epilogue": next((c["params"].get("epilogue") or {} for c in doc["cases"]),
                         EPILOGUES.get(epilogue, {})),
        "peers": sorted({r["peer"] for r in results if "peer" in r}),
        "fingerprint": fingerprint,
        "commit": doc.get("commit"),
        "tree_dirty_at_prepare": doc.get("dirty"),
        "search": {
            "method": (
                "fp16: cost-model ranking, top-K distinct structures, the raster orders of "
                "the best few and the best structures of the other shapes (same layout), "
                "each checked and timed on the GPU (quick timing); the fastest few are "
                "re-timed by the final method, interleaved with the peers, per input type "
                "(bf16 re-times the fp16 leaders)"
            ),
            "top": args.top,
            "pool": doc.get("pool"),
            "cross": doc.get("cross"),
            "leaders": args.leaders,
            "quick_timing": quick.to_dict(),
        },
        "final_timing": final.to_dict(),
        "rounds": args.rounds,
        "geomean_ratio": geomean(ratios),
        "cases_measured": len(ratios),
        "geomean_vs_peers": {name: {"geomean": geomean(v), "cases": len(v)}
                             for name, v in sorted(by_peer.items())},
        **({"acceptance": _acceptance(results)} if epilogue != "plain" else {}),
        "cases": results,
        "wall_s": time.perf_counter() - started,
    }


def _acceptance(results: list[dict[str, Any]]) -> dict[str, Any]:
    """An epilogue suite against its floor: the run baseline's geometric mean (cuBLASLt's
    fused epilogue where it computes the epilogue whole, else the unfused sequence)."""
    peers = sorted({r["peer"] for r in results if "ratio" in r})
    if len(peers) != 1 or peers[0] not in EPILOGUE_FLOORS:
        return {"peer": peers, "error": "no one epilogue peer to judge the suite by"}
    ratios = [r["ratio"] for r in results if "ratio" in r]
    floor = EPILOGUE_FLOORS[peers[0]]
    return {"peer": peers[0], "floor": floor, "geomean": geomean(ratios),
            "cases": len(ratios), "met": geomean(ratios) >= floor}


def _schedule(c: dict[str, Any]) -> str:
    return (
        f"{c['tile_m']}x{c['tile_n']}x{c['tile_k']} s{c['stages_ab']} "
        f"{'ws' if c['warp_specialized'] else 'nows'}{c['consumer_warpgroups']} "
        f"{c.get('consumer_split', '')[:4]} {c['order'][:4]} "
        f"{'pers' if c['persistent'] else 'grid'} {c.get('map_store', 'tma')} "
        f"r{c.get('raster_major', '-')}{c.get('raster_swizzle', '')}"  # designs: unset
    )


def print_table(summary: dict[str, Any]) -> None:
    if summary.get("epilogue"):
        _print_epilogue_table(summary)
        return
    print(f"\n{'case':<28} {'pipetune us':>12} {'peer us':>10} {'ratio':>7}  schedule")
    for r in summary["cases"]:
        if "ratio" not in r:
            print(f"{r['case']:<28} {'-':>12} {'-':>10} {'-':>7}  {r.get('error', '')}")
            continue
        print(
            f"{r['case']:<28} {r['pipetune_us']:>12.1f} {r['peer_us']:>10.1f} "
            f"{r['ratio']:>7.3f}  {_schedule(r['choices'])}"
        )
    print(f"geomean ratio (peer latency / pipetune latency): {summary['geomean_ratio']:.3f} "
          f"over {summary['cases_measured']} cases")


#: The epilogue table's peer columns: cuBLASLt's call, then the unfused sequence.
_EPILOGUE_COLUMNS = (("cublaslt_epilogue", "cuBLASLt"), ("torch_epilogue", "unfused"))


def _print_epilogue_table(summary: dict[str, Any]) -> None:
    """Per case pipetune's latency and, per peer, its latency and ratio; then each peer's
    geometric mean and the suite against its floor."""
    heads = "".join(f" {label + ' us':>12} {'ratio':>7}" for _, label in _EPILOGUE_COLUMNS)
    print(f"\n{'case':<28} {'pipetune us':>12}{heads}  schedule")
    for r in summary["cases"]:
        if "pipetune_us" not in r:
            print(f"{r['case']:<28} {'-':>12}  {r.get('error', '')}")
            continue
        cells = "".join(
            f" {r['peers_us'][name]:>12.1f} {r['ratios_vs_peers'][name]:>7.3f}"
            if name in r["peers_us"] else f" {'-':>12} {'-':>7}"
            for name, _ in _EPILOGUE_COLUMNS)
        print(f"{r['case']:<28} {r['pipetune_us']:>12.1f}{cells}  {_schedule(r['choices'])}")
    labels = dict(_EPILOGUE_COLUMNS)
    for name, g in summary["geomean_vs_peers"].items():
        print(f"geomean ratio vs {labels.get(name, name)} ({name}): {g['geomean']:.3f} over "
              f"{g['cases']} cases")
    a = summary["acceptance"]
    if "floor" in a:
        print(f"acceptance: vs {a['peer']} {a['geomean']:.3f} against a floor of "
              f"{a['floor']:.2f}: {'met' if a['met'] else 'NOT met'}")
    else:
        print(f"acceptance: {a['error']} ({a['peer']})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare", help="rank and render candidates (CPU)")
    p.add_argument("--device", default="h200")
    p.add_argument("--epilogue", choices=sorted(EPILOGUES), default="plain",
                   help="the suite: plain GEMMs, or with this epilogue fused")
    p.add_argument("--top", type=int, default=24)
    p.add_argument("--pool", type=int, default=400, help="cost-model top N to pick from")
    p.add_argument("--raster-top", type=int, default=4, help="structures whose rasters vary")
    p.add_argument("--cross", type=int, default=4,
                   help="best structures of every other shape (same layout) tried too")
    p.add_argument("--layouts", nargs="+", default=["kn", "nk"])
    p.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"],
                   help="input types rendered; the first is searched (the FP8 suite: "
                        "--dtypes float8_e4m3 --layouts nk)")
    p.add_argument("--shapes", nargs="*", default=[], help="MxNxK suite shapes (default all)")
    p.add_argument("--fix", nargs="*", default=[], type=knob_value, metavar="KNOB=VALUE",
                   help="rank only the slice of the space where these knobs take these values")
    p.add_argument("--out", default=str(ROOT / ".bench" / "gemm-candidates.json.gz"))
    r = sub.add_parser("run", help="search and benchmark on the GPU")
    r.add_argument("--candidates", default=str(ROOT / ".bench" / "gemm-candidates.json.gz"))
    r.add_argument("--top", type=int, default=1000, help="candidates measured per case")
    r.add_argument("--rounds", type=int, default=5)
    r.add_argument("--leaders", type=int, default=3,
                   help="fastest of the quick timing re-timed by the final method")
    r.add_argument("--peer", default=None,
                   help="the peer the ratio is against (default: the spec's run baseline, "
                        "cuBLAS; cutlass_sm80 for Ampere-class kernels)")
    r.add_argument("--deadline", type=float, default=20.0)
    r.add_argument("--only", nargs="*", default=[])
    r.add_argument("--dtypes", nargs="+", default=None,
                   help="input types timed (default: every one prepared)")
    r.add_argument("--cache", default="/tmp/pipetune-cubins")
    r.add_argument("--out", default=str(ROOT / "bench" / "results" / "gemm.json"))
    args = parser.parse_args(argv)
    prepare(args) if args.step == "prepare" else run(args)


if __name__ == "__main__":
    main()
