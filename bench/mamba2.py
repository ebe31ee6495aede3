"""The Mamba2 suite of docs/benchmarks.md against mamba_ssm's Triton kernels, on one GPU.

Searched chunk-state and chunk-scan kernels against the official ``mamba_ssm`` Triton
kernels (``_chunk_state_fwd`` / ``_chunk_scan_fwd``).

Cases: fp16, 80 heads, headdim 64, dstate 128, chunk 256, ngroups 1 at (batch, seqlen) =
(1, 1024), (1, 16384), (8, 4096), (64, 4096) (the suite), plus ngroups 8 and bf16 at
(8, 4096) (the further cases), each for three variants: chunk scan, chunk state with fp32
states (``states_in_fp32=True``, mamba_ssm's default) and chunk state with states in the
inputs' dtype (``states_in_fp32=False``: half the bytes written, the memory floor
docs/benchmarks.md counts). ``list`` prints them.

Two steps, so the GPU machine spends its time on GPU work only:

``prepare`` (any machine, no GPU): for every fp16 case, the cost model's ``--top`` best
schedules that differ in structure, plus the operator's hand-written design and its
neighbours (``NEIGHBOURS``), each rendered for fp16 and bf16; one gzip JSON.

``run`` (an H200): every fp16 candidate is checked against the fp32 reference and timed
(quick timing) by the workers' ``LocalGpuPool``; the fastest correct one is kept, and the
bf16 case of the same shape uses its schedule. The kept kernel and the peer
(``workers.baselines``: ``mamba_ssm_chunk_state`` / ``mamba_ssm_chunk_scan``, found on
``PYTHONPATH``; never committed) are then re-timed in the same worker, interleaved over
``--rounds`` rounds; both are checked against the fp32 reference. Writes ``--out`` (device
fingerprint, commit, per case: latencies, ratio = peer latency / pipetune latency, the
schedule) and prints the table with the geometric means per operator. A peer that cannot
run leaves its cases with pipetune's figures and no ratio.

    .venv/bin/python bench/mamba2.py list
    .venv/bin/python bench/mamba2.py prepare --out .bench/mamba2-candidates.json.gz
    PYTHONPATH=.:.peers python3 bench/mamba2.py run \\
        --candidates .bench/mamba2-candidates.json.gz --out bench/results/mamba2-DATE.json
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import importlib.util
import itertools
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
    dated_result,
    geomean,
    rendered_per_dtype,
    timing_configs,
    tree_state,
    write_json,
)

OPS = ("mamba2_chunk_state", "mamba2_chunk_scan")
#: Variant (the case names' prefix) -> its operator and the params it sets.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "state": ("mamba2_chunk_state", {}),
    "state16": ("mamba2_chunk_state", {"states_in_fp32": False}),
    "scan": ("mamba2_chunk_scan", {}),
}
PEERS = {"mamba2_chunk_state": "mamba_ssm_chunk_state",
         "mamba2_chunk_scan": "mamba_ssm_chunk_scan"}
BASE = {"nheads": 80, "headdim": 64, "dstate": 128, "chunk_size": 256}
#: (batch, seqlen, ngroups, dtypes timed, in the suite): the suite's shapes, then the
#: further cases (ngroups 8; bf16, which reuses the fp16 winner of its shape).
CASES: tuple[tuple[int, int, int, tuple[str, ...], bool], ...] = (
    (1, 1024, 1, ("float16",), True),
    (1, 16384, 1, ("float16",), True),
    (8, 4096, 1, ("float16", "bfloat16"), True),
    (64, 4096, 1, ("float16",), True),
    (8, 4096, 8, ("float16",), False),
)
DTYPES = ("float16", "bfloat16")
#: Knobs whose values make two schedules "the same structure" for diversity.
STRUCTURE_KEYS = ("tile_p", "tile_n", "tile_l", "tile_s", "tile_g", "warp_specialized",
                  "consumer_warpgroups", "consumer_split", "wg_schedule", "order",
                  "persistent", "map_vector_loads")
#: Each hand-written design's neighbours worth measuring on every shape, by design name
#: (``stages`` sets every stream's depth; ``pack``, heads of a B group per tile).
NEIGHBOURS: dict[str, dict[str, dict[str, tuple[Any, ...]]]] = {
    "mamba2_chunk_state": {
        "streaming": {"tile_l": (64, 128), "tile_n": (64, 128), "stages": (2, 3, 4),
                      "persistent": (False,),
                      "warp_specialized": (False,), "pack": (1, 2), "order": ("serial",),
                      "map_store": ("cuda_core", "tma")},
        "head_pairs": {"tile_l": (32, 64, 128), "stages": (2, 3, 4, 5, 6),
                       "map_store": ("cuda_core", "tma")},
    },
    "mamba2_chunk_scan": {
        design: {"tile_s": (32, 64), "stages": (2, 3), "order": ("serial", "overlap")}
        for design in ("triton_tiling", "packed_heads")},
}
STREAMS = {"mamba2_chunk_state": ("stages_xb",), "mamba2_chunk_scan": ("stages_cb", "stages_x")}


def case_params(variant: str, batch: int, seqlen: int, ngroups: int,
                dtype: str) -> dict[str, Any]:
    return {**BASE, **VARIANTS[variant][1], "batch": batch, "seqlen": seqlen,
            "ngroups": ngroups, "dtype": dtype}


def variant_of(op: str, params: dict[str, Any]) -> str:
    if op == "mamba2_chunk_scan":
        return "scan"
    return "state" if params.get("states_in_fp32", True) else "state16"


def case_name(op: str, params: dict[str, Any]) -> str:
    """``scan-8x4096-g1-fp16``: variant, batch x seqlen, ngroups, dtype (``--only`` takes
    prefixes of it)."""
    dtype = {"float16": "fp16", "bfloat16": "bf16"}[params["dtype"]]
    return (f"{variant_of(op, params)}-{params['batch']}x{params['seqlen']}"
            f"-g{params['ngroups']}-{dtype}")


def suite() -> list[dict[str, Any]]:
    """Every case: op, fp16 params (searched), the dtypes timed, whether it is in the suite."""
    return [{"op": op, "params": case_params(variant, b, s, g, "float16"),
             "dtypes": list(dtypes), "in_suite": in_suite}
            for variant, (op, _) in VARIANTS.items() for b, s, g, dtypes, in_suite in CASES]


def _in_suite(case: dict[str, Any], dtype: str) -> bool:
    """The suite proper is fp16; bf16 and ngroups 8 are its further cases."""
    return bool(case["in_suite"]) and dtype == "float16"


def _selected(case: dict[str, Any], only: list[str]) -> bool:
    names = [case_name(case["op"], {**case["params"], "dtype": d}) for d in case["dtypes"]]
    return not only or any(n.startswith(s) for n in names for s in only)


def list_cases(args: argparse.Namespace) -> None:
    """The cases, their work and compulsory traffic (no GPU, nothing rendered)."""
    from scheduler_search.ops import parse_spec

    print(f"{'case':<24} {'op':<19} {'GFLOP':>8} {'MB moved':>9}  peer")
    for case in suite():
        if not _selected(case, args.only):
            continue
        for dtype in case["dtypes"]:
            params = {**case["params"], "dtype": dtype}
            spec = parse_spec(case["op"], params)
            suite_mark = "" if _in_suite(case, dtype) else "  (further case)"
            print(f"{case_name(case['op'], params):<24} {case['op']:<19} "
                  f"{spec.flops() / 1e9:>8.1f} {spec.min_bytes() / 1e6:>9.1f}  "
                  f"{PEERS[case['op']]}{suite_mark}")


# ----- prepare (CPU) ------------------------------------------------------------------
def _design_neighbours(op: str, space: Any) -> list[Any]:
    from scheduler_search.space.designs import DESIGNS

    built = []
    for name, base in DESIGNS[op].items():
        around = NEIGHBOURS[op][name]
        for values in itertools.product(*around.values()):
            choices = {**base, **dict(zip(around, values, strict=True))}
            stages = choices.pop("stages")
            choices.update(dict.fromkeys(STREAMS[op], stages))
            pack = choices.pop("pack", 1)
            if pack > 1:  # heads of a B group stacked in the tile's rows
                choices.update(tile_g=pack, tile_p=spec_headdim(space) * pack)
            sprogram = build_design(space, choices)
            if sprogram is not None:
                built.append(sprogram)
    return built


def spec_headdim(space: Any) -> int:
    return int(space.spec.params()["headdim"])


def _candidates(op: str, spec: Any, device: Any, top: int, pool: int) -> list[tuple[str, Any]]:
    from codegen import feasibility
    from scheduler_search.space import ScheduleSpace, rank_top

    space = ScheduleSpace(spec, device, feasibility(op, device))
    candidates, _ = space.enumerate()
    chosen: list[tuple[str, Any]] = []
    seen: set[tuple] = set()
    for item in rank_top(space, candidates, pool):
        key = tuple(item.sprogram.choices.get(k) for k in STRUCTURE_KEYS)
        if key not in seen and len(chosen) < top:
            seen.add(key)
            chosen.append(("cost model", item.sprogram))
    hashes = {sp.hash for _, sp in chosen}
    for sprogram in _design_neighbours(op, space):
        if sprogram.hash not in hashes:
            hashes.add(sprogram.hash)
            chosen.append(("design", sprogram))
    return chosen


def prepare(args: argparse.Namespace) -> None:
    from scheduler_search.hardware import get_device
    from scheduler_search.ops import parse_spec

    device = get_device(args.device)
    cases, started = [], time.perf_counter()
    for case in suite():
        if not _selected(case, args.only):
            continue
        op = case["op"]
        specs = {d: parse_spec(op, {**case["params"], "dtype": d}) for d in DTYPES}
        entries = [rendered_per_dtype(source, sprogram, specs, device) for source, sprogram
                   in _candidates(op, specs["float16"], device, args.top, args.pool)]
        cases.append({**case, "candidates": entries})
        print(f"{case_name(op, case['params'])}: {len(entries)} candidates "
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
def _artifact(op: str, entry: dict[str, Any], params: dict[str, Any], rerender: bool,
              device_name: str = "h200") -> Any:
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


def _search(pool: Any, case: dict[str, Any], quick: Any, args: argparse.Namespace) -> list[dict]:
    """Check and quick-time every fp16 candidate of a case."""
    from workers import Job

    op, params = case["op"], case["params"]
    workload = {"op": op, "params": params}
    entries = case["candidates"][: args.top]
    measured = pool.measure([
        Job(workload, artifact=_artifact(op, e, params, args.rerender,
                                    args.device), timing=quick,
            deadline_s=args.deadline) for e in entries])
    return [{"source": e["source"], "hash": e["float16"]["hash"], "status": m.status.value,
             "latency_us": m.latency_us, "rel_error": m.rel_error, "registers": m.registers,
             "error": m.error[:300], "choices": e["float16"]["choices"], "entry": e}
            for e, m in zip(entries, measured, strict=True)]


def _retime(pool: Any, op: str, params: dict[str, Any], artifact: Any, final: Any,
            args: argparse.Namespace) -> dict[str, Any]:
    """The kernel and the peer in the same worker, interleaved over the rounds: medians.
    A peer that fails (unavailable here, wrong) leaves the kernel's figures and no ratio."""
    from scheduler_search.ops import parse_spec
    from workers import Job

    workload = {"op": op, "params": params}
    rounds = []
    for _ in range(args.rounds):
        rounds.append(pool.measure([
            Job(workload, artifact=artifact, timing=final, deadline_s=args.deadline),
            Job(workload, baseline=PEERS[op], timing=final, deadline_s=args.deadline)]))
    mine_failed = [r[0] for r in rounds if r[0].status.value != "ok"]
    if mine_failed:
        return {"error": f"re-timing failed: {mine_failed[0].status.value} "
                         f"{mine_failed[0].error[:300]}"}
    spec = parse_spec(op, params)
    mine = statistics.median(r[0].latency_us for r in rounds)
    record: dict[str, Any] = {
        "pipetune_us": mine, "peer": PEERS[op],
        "pipetune_tflops": spec.flops() / mine / 1e6,
        "pipetune_tbps": spec.min_bytes() / mine / 1e6,
        "rel_error": max(r[0].rel_error for r in rounds),
        "rounds_us": [[m.latency_us for m in r] for r in rounds]}
    peer_failed = [r[1] for r in rounds if r[1].status.value != "ok"]
    if peer_failed:
        record["peer_error"] = f"{peer_failed[0].status.value}: {peer_failed[0].error[:300]}"
        return record
    peer = statistics.median(r[1].latency_us for r in rounds)
    return {**record, "peer_us": peer, "ratio": peer / mine,
            "peer_tflops": spec.flops() / peer / 1e6,
            "peer_rel_error": max(r[1].rel_error for r in rounds)}


def _peer_found() -> bool:
    try:
        return importlib.util.find_spec("mamba_ssm.ops.triton.ssd_chunk_scan") is not None
    except ImportError:
        return False


def run(args: argparse.Namespace) -> None:
    from workers import LocalGpuPool, ParallelCompiler

    with gzip.open(args.candidates, "rt") as f:
        doc = json.load(f)
    args.device = doc.get("device", "h200")  # what the candidates were planned for
    cases = [c for c in doc["cases"] if _selected(c, args.only)]
    if not _peer_found():
        print("mamba_ssm's Triton kernels are not on PYTHONPATH (docs/benchmarks.md): the cases "
              "will have no ratio", flush=True)
    quick, final = timing_configs()
    results: list[dict[str, Any]] = []
    started = time.perf_counter()
    with LocalGpuPool(compiler=ParallelCompiler(cache_dir=args.cache),
                      codegen_version="bench-mamba2") as pool:
        fingerprint = pool.fingerprints[0]
        for case in cases:
            op = case["op"]
            tried = _search(pool, case, quick, args)
            ok = [t for t in tried if t["status"] == "ok"]
            searched = [{k: v for k, v in t.items() if k != "entry"} for t in tried]
            if not ok:
                name = case_name(op, case["params"])
                results.append({"case": name, "op": op, "params": case["params"],
                                "in_suite": _in_suite(case, "float16"), "searched": searched,
                                "error": "no candidate was correct"})
                print(f"{name}: no correct candidate", flush=True)
                continue
            best = min(ok, key=lambda t: t["latency_us"])
            for dtype in case["dtypes"]:
                params = {**case["params"], "dtype": dtype}
                if args.only and not any(case_name(op, params).startswith(s) for s in args.only):
                    continue
                artifact = _artifact(op, best["entry"], params, args.rerender, args.device)
                record = {"case": case_name(op, params), "op": op, "params": params,
                          "in_suite": _in_suite(case, dtype),
                          "schedule_hash": best["entry"][dtype]["hash"],
                          "choices": best["choices"], "found_by": best["source"],
                          "candidates_ok": f"{len(ok)}/{len(tried)}",
                          **_retime(pool, op, params, artifact, final, args)}
                if dtype == "float16":
                    record["searched"] = searched
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
    peer = (f"{r['peer']} {r['peer_us']:9.1f} us  ratio {r['ratio']:.3f}" if "ratio" in r
            else f"{r['peer']}: {r.get('peer_error', '')[:120]}")
    print(f"{r['case']:<24} pipetune {r['pipetune_us']:9.1f} us {r['pipetune_tflops']:6.1f} TF "
          f"{r['pipetune_tbps']:5.2f} TB/s  {peer}  ({r['candidates_ok']} ok, "
          f"{time.perf_counter() - started:.0f} s)", flush=True)


def _geomeans(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per variant: the geometric mean of the ratios over the suite (fp16, ngroups 1, the
    figure docs/benchmarks.md's targets read) and over every case measured."""
    means = {}
    for variant, (op, _) in VARIANTS.items():
        ratios = [r for r in results
                  if r["op"] == op and variant_of(op, r["params"]) == variant and "ratio" in r]
        in_suite = [r["ratio"] for r in ratios if r["in_suite"]]
        means[variant] = {"op": op, "suite": geomean(in_suite), "suite_cases": len(in_suite),
                     "all": geomean([r["ratio"] for r in ratios]), "all_cases": len(ratios)}
    return means


def _summary(args: argparse.Namespace, doc: dict[str, Any], quick: Any, final: Any,
             fingerprint: Any, results: list[dict[str, Any]], started: float) -> dict[str, Any]:
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "suite": "mamba2", "peers": PEERS, "fingerprint": fingerprint,
        "commit": doc.get("commit"), "tree_dirty_at_prepare": doc.get("dirty"),
        "rerendered": args.rerender, "codegen_version": _codegen_version(),
        "search": {"method": "fp16: the cost model's top distinct structures plus the "
                             "hand-written design's neighbours, each checked against the "
                             "fp32 reference and timed; bf16 reuses the fp16 winner",
                   "top": args.top, "pool": doc.get("pool"), "quick_timing": quick.to_dict()},
        "final_timing": final.to_dict(), "rounds": args.rounds,
        "geomean_ratio": _geomeans(results),
        "cases_measured": sum(1 for r in results if "pipetune_us" in r), "cases": results,
        "wall_s": time.perf_counter() - started,
    }


def _codegen_version() -> str:
    from codegen import codegen_version

    return codegen_version()


def print_table(summary: dict[str, Any]) -> None:
    print(f"\n{'case':<24} {'pipetune us':>12} {'peer us':>10} {'ratio':>7} {'TB/s':>6}  "
          "schedule")
    for r in summary["cases"]:
        if "pipetune_us" not in r:
            print(f"{r['case']:<24} {r.get('error', '')}")
            continue
        c = r["choices"]
        tile = "x".join(str(c[k]) for k in ("tile_l", "tile_p", "tile_n", "tile_s") if k in c)
        stages = "/".join(str(c[k]) for k in ("stages_xb", "stages_cb", "stages_x") if k in c)
        shape = (f"{tile} wg{c.get('consumer_warpgroups', 1)} {c.get('consumer_split', '')} "
                 f"s{stages} {'pers' if c.get('persistent') else 'grid'} "
                 f"{c.get('map_vector_loads', '')}")
        peer = (f"{r['peer_us']:>10.1f} {r['ratio']:>7.3f}" if "ratio" in r
                else f"{'—':>10} {'—':>7}")
        print(f"{r['case']:<24} {r['pipetune_us']:>12.1f} {peer} {r['pipetune_tbps']:>6.2f}  "
              f"{shape}")
    for variant, means in summary["geomean_ratio"].items():
        if not means["all_cases"]:
            continue
        print(f"{variant}: geomean vs {PEERS[means['op']]} {means['suite']:.3f} over the suite "
              f"({means['suite_cases']} cases), {means['all']:.3f} over all "
              f"({means['all_cases']})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    lister = sub.add_parser("list", help="print the cases (no GPU, nothing rendered)")
    lister.add_argument("--only", nargs="*", default=[], help="case name prefixes")
    p = sub.add_parser("prepare", help="rank and render candidates (CPU)")
    p.add_argument("--device", default="h200")
    p.add_argument("--top", type=int, default=8, help="cost-model structures per case")
    p.add_argument("--pool", type=int, default=200, help="cost-model top N to pick from")
    p.add_argument("--only", nargs="*", default=[], help="case name prefixes")
    p.add_argument("--out", default=str(ROOT / ".bench" / "mamba2-candidates.json.gz"))
    r = sub.add_parser("run", help="search and benchmark on the GPU")
    r.add_argument("--candidates", default=str(ROOT / ".bench" / "mamba2-candidates.json.gz"))
    r.add_argument("--top", type=int, default=1000, help="candidates measured per case")
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--deadline", type=float, default=30.0)
    r.add_argument("--only", nargs="*", default=[], help="case name prefixes")
    r.add_argument("--cache", default="/tmp/pipetune-cubins")
    r.add_argument("--rerender", action="store_true",
                   help="render the candidates' choices with this tree's code generation")
    r.add_argument("--out", default=dated_result("mamba2"))
    args = parser.parse_args(argv)
    {"list": list_cases, "prepare": prepare, "run": run}[args.step](args)


if __name__ == "__main__":
    main()
