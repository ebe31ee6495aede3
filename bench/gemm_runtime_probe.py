"""Run-time-m GEMM kernels across tile shapes and stream-K, against cuBLAS, at a few m:
where the range tuner's pool is short (small and middle m, n = k = 4096).

For each variant of the warp-specialised design (tile, stream-K waves, stages, consumer
warpgroups), planned at the range's top with m at run time and bound to each size, in one
process: checked against ``torch.matmul`` (relative error), then timed with
``do_bench`` (L2 flushed, median) next to cuBLAS at the same size. Writes every
variant's times and each size's best. ``--compare-tails`` renders every variant twice,
the second time with its last m tile zero-filled past M by TMA instead of ending at M
(``GemmHooks.last_tile_inside``), to measure what the pulled-back tile saves.

    PYTHONPATH=. python3 bench/gemm_runtime_probe.py \\
        --out bench/results/gemm-runtime-probe-DATE.json
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import dated_result, tree_state, write_json  # noqa: E402

#: Knob values swept around the design (every combination the renderer lowers).
SWEEP: dict[str, tuple[Any, ...]] = {
    "tile_m": (64, 128),
    "tile_n": (64, 128, 256),
    "tile_k": (64, 128),
    "stream_k": (None, 1, 2),
    "consumer_warpgroups": (1, 2),
}


#: The swapped sweep (the tensor cores compute Cᵀ: m along wgmma's N, any multiple of 8).
SWAP_SWEEP: dict[str, tuple[Any, ...]] = {
    "tile_m": (16, 32, 64, 96, 128, 136),
    "tile_n": (64, 128),
    "tile_k": (64,),
    "stream_k": (None, 1, 2),
    "consumer_warpgroups": (1, 2),
}
#: Knobs a variant is printed by.
SHOWN = (*SWEEP, "stages_ab", "swap_ab", "cluster_size")
#: Shared memory the operand rings may take (bytes).
RING_BYTES = 200 * 1024


def _stages(choices: dict) -> int:
    """As deep a ring as the stage's bytes allow, up to 12."""
    stage = (choices["tile_m"] + choices["tile_n"]) * choices["tile_k"] * 2
    return max(2, min(12, RING_BYTES // stage))


def variants(spec: Any, device: Any) -> list[Any]:
    """The sweeps' run-time-m sProgram that the renderer lowers, distinct."""
    from codegen import unsupported
    from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED
    from scheduler_search.sprogram import plan_sprogram

    found: dict[str, Any] = {}
    sweeps = [(SWEEP, {}), (SWAP_SWEEP, {"swap_ab": True, "map_store": "cuda_core"})]
    for sweep, fixed in sweeps:
        for values in itertools.product(*sweep.values()):
            choices = {**GEMM_WARP_SPECIALIZED, **fixed, **dict(zip(sweep, values, strict=True))}
            _add(found, spec, device, choices, plan_sprogram, unsupported)
    return list(found.values())


def paired_variants(spec: Any, device: Any, tiles: list[str]) -> list[Any]:
    """Swapped ``MxN`` tiles alone and in clusters of two along n (the pair's blocks share
    their m tile: A multicast, each loading half), where the renderer lowers them."""
    from codegen import unsupported
    from scheduler_search.space.designs import GEMM_SWAP_WIDE
    from scheduler_search.sprogram import plan_sprogram

    found: dict[str, Any] = {}
    for tile in tiles:
        tile_m, tile_n = (int(x) for x in tile.split("x"))
        base = {**GEMM_SWAP_WIDE, "tile_m": tile_m, "tile_n": tile_n,
                "consumer_warpgroups": tile_n // 64, "stream_k": None}
        for cluster in ({}, {"cluster_size": 2, "cluster_axis": "n"}):
            _add(found, spec, device, {**base, **cluster}, plan_sprogram, unsupported)
    return list(found.values())


def _add(found: dict, spec: Any, device: Any, choices: dict, plan: Any, unsupported: Any) -> None:
    """``choices`` (stages as deep as fit) planned with m at run time, if lowered."""
    if choices["stream_k"] is None:
        del choices["stream_k"]
    rows = choices["tile_n"] if choices.get("swap_ab") else choices["tile_m"]
    if rows < 64 * choices["consumer_warpgroups"]:
        return
    choices["stages_ab"] = _stages(choices)
    try:
        sprogram = replace(plan(spec, device, choices), runtime_dims=("m",))
    except Exception:  # choices the planner refuses
        return
    if unsupported(sprogram, device) is None:
        found.setdefault(sprogram.hash, sprogram)


def static_twin(do_bench: Any, choices: dict, m: int, params: dict,
                a: Any, b: Any, ref: Any, compare_tails: bool = False) -> dict[str, Any]:
    """The same choices planned for exactly ``m`` (m a compile-time constant): what the
    run-time size costs the kernel; with ``compare_tails`` also with its last tiles
    zero-filled past the edges (``zero_filled_us``)."""
    import pipetune
    from codegen import render
    from scheduler_search.hardware import get_device
    from scheduler_search.ops import parse_spec
    from scheduler_search.sprogram import plan_sprogram

    spec = parse_spec("gemm", {"m": m, **params})
    found: dict[str, Any] = {"choices": choices}
    try:
        sprogram = plan_sprogram(spec, get_device("h200"), dict(choices))
        tails = [(True, "")] + ([(False, "zero_filled_")] if compare_tails else [])
        for inside, prefix in tails:
            with last_tile_inside(inside):
                artifact = render(sprogram, spec, get_device("h200"))
            kernel = pipetune.load(artifact.to_dict())
            found[f"{prefix}rel_error"] = float((kernel(a, b).float() - ref).norm()
                                               / ref.norm())
            found[f"{prefix}us"] = do_bench(lambda kernel=kernel: kernel(a, b),
                                            return_mode="median") * 1e3
    except Exception as exc:  # a size the choices cannot be planned at
        return {"choices": choices, "error": str(exc)[:200]}
    return found


@contextlib.contextmanager
def last_tile_inside(inside: bool) -> Iterator[None]:
    """GEMM kernels rendered with the last tile ending at the edge (the default) or
    zero-filled past it."""
    from codegen.kernels.gemm import GemmHooks

    saved = GemmHooks.last_tile_inside
    GemmHooks.last_tile_inside = inside
    try:
        yield
    finally:
        GemmHooks.last_tile_inside = saved


def print_tails(m: int, timed: list[dict[str, Any]]) -> None:
    """Each variant's time with the last tile inside against zero-filled, at ``m``."""
    pairs: dict[str, dict[bool, float]] = {}
    for t in timed:
        if "us" in t and t["rel_error"] < 1e-2:
            key = ",".join(f"{k}={t['choices'].get(k)}" for k in (*SWAP_SWEEP, "swap_ab"))
            pairs.setdefault(key, {})[t["last_tile_inside"]] = t["us"]
    for key, us in pairs.items():
        if len(us) == 2:
            print(f"   tails m={m:<6} inside {us[True]:7.1f} us  zero-filled {us[False]:7.1f} us"
                  f"  ({us[False] / us[True]:.3f})  {key}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 64, 260, 500, 1700, 2500])
    parser.add_argument("--static-twins", type=int, default=2,
                        help="the best variants also timed planned for exactly m")
    parser.add_argument("--compare-tails", action="store_true",
                        help="also time each variant with its last tile zero-filled")
    parser.add_argument("--only-swapped", action="store_true",
                        help="the swapped sweep only (m along wgmma's N)")
    parser.add_argument("--swap-tiles", nargs="+", default=[], metavar="MxN",
                        help="instead of the sweeps: these swapped tiles, alone and in "
                             "clusters of two along n")
    parser.add_argument("--out", default=dated_result("gemm-runtime-probe"))
    args = parser.parse_args(argv)

    import torch
    from triton.testing import do_bench

    import pipetune
    from codegen import RangeArtifact, RangeBucket, render
    from scheduler_search.hardware import get_device
    from scheduler_search.ops import parse_spec

    device = get_device("h200")
    params = {"n": args.n, "k": args.k, "dtype": args.dtype, "b_layout": "nk"}
    spec = parse_spec("gemm", {"m": 16384, **params})
    dtype = getattr(torch, args.dtype)
    started = time.perf_counter()
    kernels = []
    tails = (True, False) if args.compare_tails else (True,)
    chosen = (paired_variants(spec, device, args.swap_tiles) if args.swap_tiles
              else variants(spec, device))
    for sprogram in chosen:
        if args.only_swapped and not sprogram.choices.get("swap_ab"):
            continue
        for inside in tails:
            with last_tile_inside(inside):
                artifact = render(sprogram, spec, device)
            # One bucket over the whole range: the loaded kernel binds each m to one module.
            whole = RangeArtifact(op="gemm", params={"m": {"min": 1, "max": 16384}, **params},
                                  dim="m", size_from=("a", 0),
                                  buckets=(RangeBucket(1, 16384, artifact),))
            kernels.append((sprogram, inside, pipetune.load(whole.to_dict())))
    print(f"{len(kernels)} variants rendered in {time.perf_counter() - started:.1f}s", flush=True)
    rows = []
    for m in args.sizes:
        a = torch.randn(m, args.k, device="cuda", dtype=dtype)
        b = torch.randn(args.n, args.k, device="cuda", dtype=dtype)
        ref = torch.matmul(a, b.t()).float()
        cublas_us = do_bench(lambda a=a, b=b: torch.matmul(a, b.t()), return_mode="median") * 1e3
        timed = []
        for sprogram, inside, kernel in kernels:
            try:
                out = kernel(a, b).float()
                error = float((out - ref).norm() / ref.norm())
                us = do_bench(lambda kernel=kernel, a=a, b=b: kernel(a, b),
                              return_mode="median") * 1e3
            except Exception as exc:  # a variant that fails is reported, not fatal
                timed.append({"choices": sprogram.choices, "last_tile_inside": inside,
                              "error": str(exc)[:200]})
                continue
            timed.append({"choices": sprogram.choices, "last_tile_inside": inside, "us": us,
                          "rel_error": error, "vs_cublas": cublas_us / us})
        if args.compare_tails:
            print_tails(m, timed)
        ok = sorted((t for t in timed if "us" in t and t["rel_error"] < 1e-2
                     and t["last_tile_inside"]), key=lambda t: t["us"])
        static = [static_twin(do_bench, t["choices"], m, params, a, b, ref, args.compare_tails)
                  | {"runtime_us": t["us"]} for t in ok[: args.static_twins]]
        rows.append({"m": m, "cublas_us": cublas_us, "variants": timed,
                     "best": ok[:5], "static_twins": static})
        for t in static:
            print(f"   static {t.get('us', float('nan')):7.1f} us (runtime "
                  f"{t.get('runtime_us', float('nan')):7.1f}, zero-filled tail "
                  f"{t.get('zero_filled_us', float('nan')):7.1f}) {t.get('error', '')}",
                  flush=True)
        best = ok[0] if ok else None
        print(f"m={m:<6} cublas {cublas_us:7.1f} us  best "
              + (f"{best['us']:7.1f} us ({best['vs_cublas']:.3f}) {best['choices']}"
                 if best else "none"), flush=True)
        for t in ok[1:4]:
            print(f"          {t['us']:7.1f} us ({t['vs_cublas']:.3f}) "
                  f"{ {k: t['choices'].get(k) for k in SHOWN} }",
                  flush=True)
    write_json(args.out, {"suite": "gemm-runtime-probe", "params": params, **tree_state(),
                          "variants": len(kernels), "sizes": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
