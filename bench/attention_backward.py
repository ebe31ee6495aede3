"""The attention backward suite (docs/attention_backward.md): searched dq / dk / dv kernels
against cuDNN's SDPA backward and FlashAttention-2's, on one GPU.

The cases are the attention suite's shapes (docs/benchmarks.md: GQA and MHA, head_dim 128
and 64, causal and not, a length that no tile divides), in ``--layouts``. One command does
everything on the GPU machine (``--jobs`` processes rank and render while nothing else
runs): per fp16 case the cost model's ``--top`` best schedules that differ in structure are
rendered for fp16 and bf16; every fp16 candidate is checked against the fp32 reference (dq,
dk and dv) and quick-timed by the workers' ``LocalGpuPool``; the fastest correct one is
kept, and the bf16 case of the same shape uses its schedule. The kept kernel and the peers
(``torch.autograd.grad`` on SDPA with the backend forced, the forward's time excluded) are
re-timed in the same worker, interleaved over ``--rounds`` rounds; the kept kernel is
checked again on every round. ``--deterministic`` measures the kernels whose dq sums run
in a fixed order. ``--twins KNOB ...`` adds each ranked structure at those knobs' other
options (``order persistent``: the serial twin of an interleaved winner, the persistent
twin of a one-unit-a-block one), timed in the same search. Writes ``--out`` and prints
the table with geometric means.

    PYTHONPATH=. python3 bench/attention_backward.py --jobs 16 \\
        --out bench/results/attention-backward-2026-12-05.json
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.attention import _retime, _search, case_name, flops, print_table  # noqa: E402
from bench.common import geomean, rendered_per_dtype, timing_configs, tree_state, write_json  # noqa: E402

OP = "attention_backward"
PEERS = ("sdpa_cudnn_backward", "sdpa_flash_backward")
#: Knobs whose values make two schedules "the same structure" for diversity.
STRUCTURE_KEYS = ("tile_q", "tile_kv", "consumer_warpgroups", "persistent", "stages_q",
                  "stages_do", "map_softmax_p", "order")
#: The backward's five products against the forward's two.
BACKWARD_FLOPS_PER_FORWARD = 2.5


def backward_flops(params: dict[str, Any]) -> float:
    return BACKWARD_FLOPS_PER_FORWARD * flops(params)


def suite_cases(layouts: list[str], deterministic: bool = False) -> list[dict[str, Any]]:
    """The attention suite's fp16 shapes in each layout (bf16 reuses their schedules);
    ``deterministic``: dq summed in a fixed order."""
    from scheduler_search.ops.suites import attention_suite

    return [{**params, "layout": layout, "deterministic": deterministic} for layout in layouts
            for params in attention_suite() if params["dtype"] == "float16"]


def prepare_case(params: dict[str, Any], device_name: str, top: int,
                 pool: int, twins: tuple[str, ...] = ()) -> dict[str, Any]:
    """One case's candidates: the cost model's ``top`` best distinct structures among its
    ``pool`` best, each rendered in fp16 and bf16 (a process of its own); then, for each
    knob of ``twins``, each of those with that knob's other options where they build
    (``source`` "twin"), so a choice the model ranks apart is timed side by side."""
    from codegen import feasibility
    from scheduler_search.hardware import get_device
    from scheduler_search.ops import parse_spec
    from scheduler_search.space import ScheduleSpace, rank_top

    device = get_device(device_name)
    specs = {d: parse_spec(OP, {**params, "dtype": d}) for d in ("float16", "bfloat16")}
    space = ScheduleSpace(specs["float16"], device, feasibility(OP, device))
    candidates, _ = space.enumerate()
    chosen, seen = [], set()
    for item in rank_top(space, candidates, pool):
        key = tuple(item.sprogram.choices.get(k) for k in STRUCTURE_KEYS)
        if key not in seen and len(chosen) < top:
            seen.add(key)
            chosen.append(rendered_per_dtype("cost model", item.sprogram, specs, device))
    chosen += twin_candidates(space, [c["float16"]["choices"] for c in chosen], twins,
                              specs, device)
    return {"params": specs["float16"].params(), "candidates": chosen}


def twin_candidates(space: Any, ranked: list[dict[str, Any]], twins: tuple[str, ...],
                    specs: dict[str, Any], device: Any) -> list[dict[str, Any]]:
    """Each of ``ranked`` with one knob of ``twins`` at another of its options, where the
    space builds it and it is not among the candidates already."""
    options = {k.name: k.options for k in space.knobs}
    seen = {tuple(sorted(c.items())) for c in ranked}
    out = []
    for choices in ranked:
        for knob in twins:
            for value in options.get(knob, ()):
                twin = {**choices, knob: value}
                sprogram, validity = space.build(twin)
                key = tuple(sorted(sprogram.choices.items()))
                if validity.ok and key not in seen:
                    seen.add(key)
                    out.append(rendered_per_dtype("twin", sprogram, specs, device))
    return out


def measure_case(pool: Any, case: dict[str, Any], quick: Any, final: Any,
                 args: argparse.Namespace) -> list[dict[str, Any]]:
    """Search one prepared case in fp16 (its ranked structures and their twins, all of
    them), then re-time its winner in every dtype."""
    from codegen.artifact import KernelArtifact

    tried = _search(pool, case, quick, args, OP)
    ok = [t for t in tried if t["status"] == "ok"]
    searched = [{k: v for k, v in t.items() if k != "entry"} for t in tried]
    if not ok:
        return [{"case": case_name(case["params"]), "params": case["params"],
                 "searched": searched, "error": "no candidate was correct"}]
    best = min(ok, key=lambda t: t["latency_us"])
    records = []
    for dtype in args.dtypes:
        params = {**case["params"], "dtype": dtype}
        artifact = KernelArtifact.from_dict(best["entry"][dtype]["artifact"])
        record = {"case": case_name(params), "params": params,
                  "schedule_hash": best["entry"][dtype]["hash"], "choices": best["choices"],
                  "candidates_ok": f"{len(ok)}/{len(tried)}",
                  **_retime(pool, params, artifact, final, args, OP, PEERS, ())}
        if "pipetune_us" in record:
            record["pipetune_tflops"] = backward_flops(params) / record["pipetune_us"] / 1e6
            record["cudnn_tflops"] = backward_flops(params) / record["cudnn_us"] / 1e6
        if dtype == "float16":
            record["searched"] = searched
        records.append(record)
    return records


def summary(args: argparse.Namespace, fingerprint: Any, quick: Any, final: Any,
            results: list[dict[str, Any]], started: float) -> dict[str, Any]:
    measured = [r for r in results if "vs_cudnn" in r]
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "suite": OP, "peers": list(PEERS), "fingerprint": fingerprint, **tree_state(),
        "search": {"method": "fp16: the cost model's top distinct structures, each checked "
                             "against the fp32 reference (dq, dk, dv) and timed; bf16 reuses "
                             "the fp16 winner", "top": args.top, "pool": args.pool,
                   "quick_timing": quick.to_dict()},
        "final_timing": final.to_dict(), "rounds": args.rounds,
        "flops": f"{BACKWARD_FLOPS_PER_FORWARD} x the forward's (halved when causal)",
        "geomean_vs_cudnn": geomean([r["vs_cudnn"] for r in measured]),
        "geomean_vs_fa2": geomean([r["vs_fa2"] for r in measured]),
        "cases_measured": len(measured), "cases_failed": len(results) - len(measured),
        "cases": results, "wall_s": time.perf_counter() - started,
    }


def describe_backward(c: dict[str, Any]) -> str:
    """A backward schedule's choices, as the table's last column."""
    return (f"{c['tile_q']}x{c['tile_kv']} wg{c['consumer_warpgroups']} "
            f"q{c['stages_q']}/do{c['stages_do']} {'pers' if c['persistent'] else 'grid'} "
            f"p:{c['map_softmax_p']}{' heaviest-first' if c.get('raster_heaviest_first') else ''}")


def run(args: argparse.Namespace) -> None:
    from workers import LocalGpuPool, ParallelCompiler

    started = time.perf_counter()
    wanted = [p for p in suite_cases(args.layouts, args.deterministic)
              if not args.only or any(case_name(p).startswith(s) for s in args.only)]
    with ProcessPoolExecutor(max_workers=args.jobs) as processes:
        futures = [processes.submit(prepare_case, p, args.device, args.top, args.pool,
                                    tuple(args.twins)) for p in wanted]
        quick, final = timing_configs()
        results: list[dict[str, Any]] = []
        with LocalGpuPool(compiler=ParallelCompiler(cache_dir=args.cache),
                          codegen_version="bench-attention-backward") as pool:
            fingerprint = pool.fingerprints[0]
            for future in futures:
                for record in measure_case(pool, future.result(), quick, final, args):
                    results.append(record)
                    print_row(record, started)
                write_json(args.out, summary(args, fingerprint, quick, final, results, started))
    doc = summary(args, fingerprint, quick, final, results, started)
    write_json(args.out, doc)
    print_table(doc, describe_backward)
    print(f"{doc['cases_failed']} cases without a correct kernel")


def print_row(r: dict[str, Any], started: float) -> None:
    tail = (r.get("error") or f"{r['pipetune_us']:.1f} us vs cuDNN {r['vs_cudnn']:.3f} "
            f"vs FA2 {r['vs_fa2']:.3f} ({r['candidates_ok']} ok)")
    print(f"{r['case']:<34} {tail}  ({time.perf_counter() - started:.0f} s)", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="h200")
    parser.add_argument("--layouts", nargs="+", choices=("bshd", "bhsd"), default=["bshd"])
    parser.add_argument("--top", type=int, default=6, help="cost-model structures per case")
    parser.add_argument("--pool", type=int, default=200, help="cost-model top N to pick from")
    parser.add_argument("--jobs", type=int, default=8, help="cases ranked at once (processes)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--deadline", type=float, default=30.0)
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--twins", nargs="*", default=[], metavar="KNOB",
                        help="also time each structure with these knobs' other options "
                             "(e.g. order persistent)")
    parser.add_argument("--deterministic", action="store_true",
                        help="dq summed in a fixed order (the spec's deterministic field)")
    parser.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"])
    parser.add_argument("--cache", default="/tmp/pipetune-cubins")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" /
                                             f"attention-backward-{datetime.date.today()}.json"))
    args = parser.parse_args(argv)
    args.rerender = False
    run(args)


if __name__ == "__main__":
    main()
