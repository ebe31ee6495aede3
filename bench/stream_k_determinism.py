"""Stream-K GEMMs called many times on the same inputs: do they give the same bits?

Each stream-K design of :func:`stream_k_designs` is rendered at each shape, loaded as a
user loads it (``workers.load`` on torch tensors, B as N x K), called ``--calls`` times
on the same seeded random inputs (every fourth call followed by a synchronize, so some
calls start on an idle GPU and some behind a queue), and every output is compared bit for
bit with the first call's. Where outputs differ, the rows and columns that ever differed
are recorded, to tell a race in the sum of parts from two tiles writing the same element.
``--compare-tails`` renders each design also with its last tiles zero-filled past the
matrix's edge instead of pulled back over the tile before (``GemmHooks.last_tile_inside``),
and times both back to back.

    PYTHONPATH=. python3 bench/stream_k_determinism.py --calls 1000 \\
        --out bench/results/stream-k-determinism-DATE.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import dated_result, tree_state, write_json
from bench.gemm_runtime_probe import last_tile_inside
from scheduler_search.space.designs import stream_k_designs

#: The issue's failing shape (4000 x 6000 x 2000: partial tiles on both axes), a large
#: one of the suite, and one whose 128 x 256 tiles leave the last wave of 132 blocks 2%
#: full (9 x 15 = 135 tiles).
SHAPES = ((4000, 6000, 2000), (8192, 14336, 4096), (1152, 3840, 4096))


def differing_span(torch: Any, mask: Any) -> dict[str, list[int]]:
    """The first and last row and column where ``mask`` (outputs differ) is set."""
    rows = torch.nonzero(mask.any(dim=1)).flatten()
    cols = torch.nonzero(mask.any(dim=0)).flatten()
    return {"rows": [int(rows.min()), int(rows.max())],
            "cols": [int(cols.min()), int(cols.max())]}


def repeat_calls(torch: Any, kernel: Any, a: Any, b: Any, calls: int) -> dict[str, Any]:
    """Call ``kernel`` ``calls`` times; count the outputs whose bits differ from the
    first's, their largest difference and where they differ."""
    first = kernel(a, b).clone()
    differing, largest, ever = 0, 0.0, torch.zeros_like(first, dtype=torch.bool)
    for index in range(calls):
        out = kernel(a, b)
        if index % 4 == 3:
            torch.cuda.synchronize()
        mask = out != first
        if bool(mask.any()):
            differing += 1
            largest = max(largest, float((out.float() - first.float()).abs().max()))
            ever |= mask
    reference = a.float() @ b.float().t()
    found: dict[str, Any] = {
        "calls": calls, "differing_calls": differing, "largest_difference": largest,
        "rel_error": float((first.float() - reference).norm() / reference.norm()),
    }
    if differing:
        found["differing_elements"] = int(ever.sum())
        found.update(differing_span(torch, ever))
    return found


def measure(torch: Any, shape: tuple[int, int, int], choices: dict, args: argparse.Namespace,
            a: Any, b: Any) -> dict[str, Any]:
    """One design at one shape, with the last tile pulled back (and zero-filled)."""
    from bench.launch_overhead import back_to_back_us
    from codegen import render
    from scheduler_search.hardware import get_device
    from scheduler_search.ops import parse_spec
    from scheduler_search.sprogram import plan_sprogram
    from workers import load

    m, n, k = shape
    device = get_device("h200")
    spec = parse_spec("gemm", {"m": m, "n": n, "k": k, "dtype": args.dtype, "b_layout": "nk"})
    found: dict[str, Any] = {"choices": choices}
    tails = [(True, "")] + ([(False, "zero_filled_")] if args.compare_tails else [])
    try:
        sprogram = plan_sprogram(spec, device, dict(choices))
        for inside, prefix in tails:
            with last_tile_inside(inside):
                kernel = load(render(sprogram, spec, device))
            found[f"{prefix}bits"] = repeat_calls(torch, kernel, a, b, args.calls)
            if args.time:
                call = [lambda kernel=kernel: kernel(a, b)]
                found[f"{prefix}b2b_us"] = back_to_back_us(torch, call, 200)
    except Exception as exc:  # a design the shape cannot be planned at
        found["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", default=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--compare-tails", action="store_true")
    parser.add_argument("--time", action="store_true", help="time each kernel back to back")
    parser.add_argument("--designs", type=int, nargs="*",
                        help="indexes into stream_k_designs() (default: all)")
    parser.add_argument("--out", default=dated_result("stream-k-determinism"))
    args = parser.parse_args(argv)
    import torch

    doc: dict[str, Any] = {"tree": tree_state(), "device": torch.cuda.get_device_name(),
                           "dtype": args.dtype, "cases": []}
    dtype = getattr(torch, args.dtype)
    for text in args.shapes:
        shape = tuple(int(v) for v in text.split("x"))
        m, n, k = shape
        generator = torch.Generator(device="cuda").manual_seed(5)
        a = torch.randn(m, k, device="cuda", dtype=dtype, generator=generator)
        b = torch.randn(n, k, device="cuda", dtype=dtype, generator=generator)
        designs = stream_k_designs()
        for choices in [designs[i] for i in args.designs] if args.designs else designs:
            started = time.perf_counter()
            found = {"shape": list(shape), **measure(torch, shape, choices, args, a, b)}
            found["seconds"] = round(time.perf_counter() - started, 2)
            doc["cases"].append(found)
            print({key: found.get(key) for key in ("shape", "error", "bits", "b2b_us",
                                                    "zero_filled_bits", "zero_filled_b2b_us")},
                  {key: choices.get(key) for key in ("tile_m", "tile_n", "consumer_warpgroups",
                                                     "stream_k", "map_store", "swap_ab",
                                                     "order")}, flush=True)
            write_json(args.out, doc)
    unstable = [c for c in doc["cases"] if c.get("bits", {}).get("differing_calls")]
    print(f"{len(doc['cases'])} cases, {len(unstable)} with differing bits; {args.out}")
    return 1 if unstable else 0


if __name__ == "__main__":
    sys.exit(main())
