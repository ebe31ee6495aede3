"""Which GEMM schedules stream a decode step's weight fastest: a grid of few-tile designs
and the cost model's picks, timed by the graph method against cuBLAS, at decode shapes.

Decode GEMMs (m = 1..256 tokens against an n x k weight) are memory-bound: the kernel's
job is to keep every SM streaming the weight. This probe measures, at each ``--shapes``
case (bf16, B stored n x k as a linear layer's weight), every schedule of a grid over the
levers for few tiles (swap-AB with the tokens on wgmma's N side, the n tile, the k tile,
the ring as deep as shared memory holds, stream-K's waves, which splits k over the SMs
when there are fewer tiles than SMs) beside the exact-shape space's cost-model picks,
all by the workers' graph-replay timing (``workers.graph_timing``), and cuBLAS
(``torch.matmul``) timed the same way in the same worker. It answers which levers the
search space must offer; it is not a suite figure (``bench/decode.py`` is).

    .venv/bin/python bench/decode_designs.py prepare --out .bench/decode-designs.json.gz
    PYTHONPATH=. python3 bench/decode_designs.py run --candidates .bench/decode-designs.json.gz \\
        --out $OUT/decode-designs.json
"""

from __future__ import annotations

import argparse
import gzip
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

from bench.common import geomean, tree_state, write_json  # noqa: E402

#: m x n x k of the issue's table (Llama-3-8B's o and Mixtral's experts at decode sizes).
SHAPES = ("1x4096x4096", "16x4096x4096", "128x4096x4096", "1x14336x4096", "16x14336x4096",
          "1x4096x14336", "64x6144x4096", "8x1280x8192")
#: Shared memory a design's ring may take.
RING_BYTES = 200 * 1024


def few_tile_designs(m: int) -> list[dict[str, Any]]:
    """The grid: swapped designs (tokens along wgmma's N: 8..64) and plain ones with a
    64-row m tile, each n tile, k tile and stream-K share, the ring as deep as fits; for
    more than 64 tokens also :func:`many_token_designs`."""
    from scheduler_search.space.designs import GEMM_SWAP_WIDE, GEMM_WARP_SPECIALIZED

    designs = []
    for tile_m, tile_n, tile_k, waves in itertools.product(
            (8, 16, 32, 64), (64, 128, 256), (64, 128), (0, 1, 2)):
        stage_bytes = (tile_m + tile_n) * tile_k * 2
        designs.append({**GEMM_SWAP_WIDE, "tile_m": tile_m, "tile_n": tile_n,
                        "tile_k": tile_k, "consumer_warpgroups": max(1, tile_n // 128),
                        "stages_ab": min(12, RING_BYTES // stage_bytes), "stream_k": waves})
    for tile_m, tile_n, tile_k, waves in itertools.product(
            (64, 128), (64, 128, 256), (64, 128), (0, 1, 2)):
        stage_bytes = (tile_m + tile_n) * tile_k * 2
        designs.append({**GEMM_WARP_SPECIALIZED, "tile_m": tile_m, "tile_n": tile_n,
                        "tile_k": tile_k, "consumer_warpgroups": tile_m // 64,
                        "stages_ab": min(6, RING_BYTES // stage_bytes), "stream_k": waves})
    return designs + (many_token_designs(m) if m > 64 else [])


def many_token_designs(m: int) -> list[dict[str, Any]]:
    """Designs that read the weight once at 65..256 tokens, where 64-row m tiles read it
    once a tile: every token in one swapped tile (wgmma's N up to 256), with stream-K
    spreading the few n tiles over the SMs, and pairs of 64-row m tiles in a cluster
    that share each weight tile by TMA multicast, with and without stream-K over the
    pairs (cuBLAS's plan where the weight has few tiles); every token in one 128-row tile
    in clusters along n that share it, and four m tiles in a cluster sharing the weight."""
    from scheduler_search.space.designs import GEMM_SWAP_WIDE, GEMM_WARP_SPECIALIZED

    tokens = -(-m // 8) * 8
    designs = []
    for tile_n, tile_k, waves in itertools.product((64, 128), (64, 128), (0, 1, 2)):
        stage_bytes = (tokens + tile_n) * tile_k * 2
        designs.append({**GEMM_SWAP_WIDE, "tile_m": tokens, "tile_n": tile_n,
                        "tile_k": tile_k, "consumer_warpgroups": tile_n // 64,
                        "stages_ab": min(12, RING_BYTES // stage_bytes), "stream_k": waves})
    for tile_n, tile_k, waves in itertools.product((64, 96, 128, 192), (64, 128), (0, 1)):
        stage_bytes = (64 + tile_n) * tile_k * 2
        designs.append({**GEMM_WARP_SPECIALIZED, "tile_m": 64, "tile_n": tile_n,
                        "tile_k": tile_k, "consumer_warpgroups": 1, "cluster_size": 2,
                        "cluster_axis": "m", "stages_ab": min(8, RING_BYTES // stage_bytes),
                        "stream_k": waves})
    for tile_n, tile_k, size, waves in itertools.product((64, 128), (64, 128), (2, 4), (1, 2)):
        # every token in one 128-row tile, the token slice multicast along n (cuBLAS's
        # plan at 128 x 1280 x 8192: split k over clusters that share the activations)
        stage_bytes = (128 + tile_n) * tile_k * 2
        designs.append({**GEMM_WARP_SPECIALIZED, "tile_m": 128, "tile_n": tile_n,
                        "tile_k": tile_k, "consumer_warpgroups": 2, "cluster_size": size,
                        "cluster_axis": "n", "stages_ab": min(8, RING_BYTES // stage_bytes),
                        "stream_k": waves})
    for tile_n, waves in itertools.product((64, 128), (0, 1)):  # four m tiles share B
        designs.append({**GEMM_WARP_SPECIALIZED, "tile_m": 64, "tile_n": tile_n,
                        "tile_k": 64, "consumer_warpgroups": 1, "cluster_size": 4,
                        "cluster_axis": "m", "stages_ab": 8, "stream_k": waves})
    return designs


def mid_token_designs(m: int) -> list[dict[str, Any]]:
    """Designs for the middle of a range over m (a few hundred to a few thousand tokens,
    where tiles fill one to three waves and the GPU is nearly compute-bound): 128-, 192-
    and 256-row m tiles over every n tile the space has from 128 to 256 rows, with and
    without stream-K's last wave, in both tile orders; and pairs of m tiles in a cluster
    sharing each weight slice (cuBLAS's plan there) where the m tiles pair up."""
    from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED

    designs = []
    for (tile_m, warpgroups), tile_n, waves, raster in itertools.product(
            ((128, 2), (192, 3), (256, 2)), (128, 160, 192, 224, 256), (0, 1), ("m", "n")):
        stage_bytes = (tile_m + tile_n) * 64 * 2
        design = {**GEMM_WARP_SPECIALIZED, "tile_m": tile_m, "tile_n": tile_n, "tile_k": 64,
                  "consumer_warpgroups": warpgroups, "raster_major": raster,
                  "stages_ab": min(6, RING_BYTES // stage_bytes), "stream_k": waves}
        designs.append(design)
        if -(-m // tile_m) % 2 == 0:
            designs.append({**design, "cluster_size": 2, "cluster_axis": "m"})
    return designs


#: Consumer warpgroups of an unswapped m tile (a 256-row one: two of two row blocks).
WARPGROUPS = {64: 1, 128: 2, 192: 3, 256: 2}


def fitted_token_designs(m: int, n: int, blocks: int = 132) -> list[dict[str, Any]]:
    """Tiles sized so the grid fills whole waves of ``blocks`` (cuBLAS's plan in the middle
    of a range: 256 weight rows by 152 tokens at 442 x 11200 x 1664, 132 tiles): swapped
    tiles over 128 or 256 weight rows (two consumers) with the tokens on wgmma's N, that N
    the least multiple of 8 giving ``t`` token tiles, for each ``t`` it fits in 8..256;
    and unswapped 64- to 256-row m tiles with the n tile the least multiple of 16 making
    a whole wave count. Each with and without stream-K's last wave; the swapped ones
    also with their transposed output staged for a TMA store."""
    from scheduler_search.space.designs import (
        GEMM_SWAP_WIDE,
        GEMM_WARP_SPECIALIZED,
        with_transposed_tma_store,
    )

    designs = []
    for tile_n in (128, 256):
        n_tiles = -(-n // tile_n)
        for token_tiles in range(1, 9):
            tokens = -(-m // (8 * token_tiles)) * 8
            if not 8 <= tokens <= 256 or -(-m // tokens) != token_tiles:
                continue
            if n_tiles * token_tiles > 3 * blocks:
                continue
            stage_bytes = (tokens + tile_n) * 64 * 2
            for waves in (0, 1):
                design = {**GEMM_SWAP_WIDE, "tile_m": tokens, "tile_n": tile_n,
                          "tile_k": 64, "consumer_warpgroups": 2,
                          "stages_ab": min(8, RING_BYTES // stage_bytes), "stream_k": waves}
                designs += [design, with_transposed_tma_store(design)]
    for tile_m in (64, 128, 192, 256):
        m_tiles = -(-m // tile_m)
        for wave_count in (1, 2, 3):
            per_wave = blocks * wave_count // m_tiles
            if per_wave < 1:
                continue
            tile_n = -(-n // per_wave // 16) * 16
            if not 64 <= tile_n <= 256:
                continue
            stage_bytes = (tile_m + tile_n) * 64 * 2
            for waves in (0, 1):
                designs.append({**GEMM_WARP_SPECIALIZED, "tile_m": tile_m, "tile_n": tile_n,
                                "tile_k": 64, "consumer_warpgroups": WARPGROUPS[tile_m],
                                "stages_ab": min(6, RING_BYTES // stage_bytes),
                                "stream_k": waves})
    return designs


def split_designs(m: int, n: int, blocks: int = 132) -> list[dict[str, Any]]:
    """Split-K over clusters (the space's ``split_k``) for weights of few tiles: every
    tile shape :func:`split_k_designs` seeds, with each split from 2 to 8 that keeps the
    grid in one wave of ``blocks``, both k tiles, one tile a cluster or persistent."""
    from scheduler_search.space.designs import split_k_designs

    designs = []
    for seed in split_k_designs(m, n, blocks):
        tiles = -(-m // seed["tile_m"]) * -(-n // seed["tile_n"])
        for split, tile_k, persistent in itertools.product(range(2, 9), (64, 128),
                                                            (False, True)):
            if tiles * split > blocks:
                continue
            stage_bytes = (seed["tile_m"] + seed["tile_n"]) * tile_k * 2
            design = {**seed, "split_k": split, "tile_k": tile_k, "persistent": persistent,
                      "stages_ab": min(12, 176 * 1024 // stage_bytes)}
            if design not in designs:
                designs.append(design)
    return designs


def _grid(name: str, m: int, n: int) -> list[dict[str, Any]]:
    """The designs of grid ``name`` at m tokens against a weight of n rows."""
    if name == "split":
        return split_designs(m, n) + few_tile_designs(m)
    if name == "mid":
        return mid_token_designs(m)
    if name == "fitted":
        return fitted_token_designs(m, n)
    return few_tile_designs(m)


def _spec(shape: str, dtype: str) -> Any:
    from scheduler_search.ops.gemm import GemmSpec

    m, n, k = (int(x) for x in shape.split("x"))
    return GemmSpec(m=m, n=n, k=k, dtype=dtype, b_layout="nk")


def prepare(args: argparse.Namespace) -> None:
    """Render every valid design of the grid and the cost model's top picks per shape."""
    from codegen import feasibility, render
    from scheduler_search.hardware import get_device
    from scheduler_search.space import ScheduleSpace, rank_top

    device = get_device("h200")
    cases = []
    for shape in args.shapes:
        spec = _spec(shape, args.dtype)
        space = ScheduleSpace(spec, device, feasibility("gemm", device))
        candidates, _ = space.enumerate()
        picks = [item.sprogram.choices for item in rank_top(space, candidates, args.pool)]
        entries, seen = [], set()
        grid = _grid(args.grid, spec.m, spec.n)
        for source, choices in [("grid", c) for c in grid] + \
                [("cost_model", c) for c in picks[: args.top]]:
            sprogram, validity = space.build(choices)
            while (source == "grid" and not validity.ok and choices["stages_ab"] > 2
                   and all(r.reason.value == "smem_exceeded" for r in validity.rejections)):
                choices = {**choices, "stages_ab": choices["stages_ab"] - 1}  # the ring fits
                sprogram, validity = space.build(choices)
            if not validity.ok:
                entries.append({"source": source, "choices": choices,
                                "invalid": str(validity.rejections)[:200]})
                continue
            if sprogram.hash in seen:
                continue
            artifact = render(sprogram, spec, device)
            seen.add(sprogram.hash)
            entries.append({"source": source, "hash": sprogram.hash, "choices": sprogram.choices,
                            "artifact": artifact.to_dict()})
        valid = sum(1 for e in entries if "artifact" in e)
        print(f"{shape}: {valid} candidates ({len(entries) - valid} invalid)", flush=True)
        cases.append({"params": spec.params(), "candidates": entries})
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(out, "wt") as f:
        json.dump({**tree_state(), "cases": cases}, f)


def _measure_case(pool: Any, case: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    from codegen.artifact import KernelArtifact
    from workers import Job, TimingConfig

    params = case["params"]
    workload = {"op": "gemm", "params": params}
    graph = TimingConfig(warmup_launches=2, warmup_ms=0.0, min_samples=args.samples,
                         min_time_ms=0.0, method="graph")
    events = TimingConfig(warmup_launches=2, warmup_ms=0.0, min_samples=args.samples,
                          min_time_ms=0.0)
    entries = [e for e in case["candidates"] if "artifact" in e]
    jobs = [Job(workload, artifact=KernelArtifact.from_dict(e["artifact"]), timing=graph,
                deadline_s=args.deadline) for e in entries]
    measured = pool.measure(jobs)
    tried = [{"source": e["source"], "hash": e["hash"], "choices": e["choices"],
              "status": m.status.value, "latency_us": m.latency_us, "error": m.error[:200]}
             for e, m in zip(entries, measured, strict=True)]
    ok = sorted((t for t in tried if t["status"] == "ok"), key=lambda t: t["latency_us"])
    leaders = ok[: args.leaders]
    rounds = []
    for _ in range(args.rounds):  # leaders and cuBLAS interleaved, both methods
        batch = [Job(workload, artifact=KernelArtifact.from_dict(
                     next(e for e in entries if e["hash"] == t["hash"])["artifact"]),
                     timing=timing, deadline_s=args.deadline)
                 for timing in (graph, events) for t in leaders]
        peer = _spec_of(params).run_baseline() or "cublas"  # scaled_mm for 8-bit inputs
        batch += [Job(workload, baseline=peer, timing=timing, deadline_s=args.deadline)
                  for timing in (graph, events)]
        rounds.append([m.latency_us for m in pool.measure(batch)])
    n = len(leaders)

    def median(i: int) -> float | None:
        values = [r[i] for r in rounds if r[i] is not None]
        return statistics.median(values) if values else None

    graph_us = [median(i) for i in range(n)]
    events_us = [median(n + i) for i in range(n)]
    cublas_graph, cublas_events = median(2 * n), median(2 * n + 1)
    best = min((i for i in range(n) if graph_us[i]), key=lambda i: graph_us[i], default=None)
    bytes_moved = sum(t.size_bytes for t in _spec_of(params).tensors())
    row = {"params": params, "tried": tried, "leaders": [
        {**leaders[i], "graph_us": graph_us[i], "events_us": events_us[i]} for i in range(n)],
        "cublas_graph_us": cublas_graph, "cublas_events_us": cublas_events}
    if best is not None and cublas_graph:
        row.update(best=leaders[best]["choices"], best_graph_us=graph_us[best],
                   ratio_graph=cublas_graph / graph_us[best],
                   best_tb_s=bytes_moved / graph_us[best] / 1e6,
                   cublas_tb_s=bytes_moved / cublas_graph / 1e6)
    return row


def _spec_of(params: dict[str, Any]) -> Any:
    from scheduler_search.ops.gemm import GemmSpec

    return GemmSpec(**params)


def run(args: argparse.Namespace) -> None:
    from workers import LocalGpuPool, ParallelCompiler

    with gzip.open(args.candidates, "rt") as f:
        doc = json.load(f)
    started = time.perf_counter()
    rows = []
    with LocalGpuPool(compiler=ParallelCompiler(cache_dir=args.cache),
                      codegen_version="bench-decode-designs") as pool:
        fingerprint = pool.fingerprints[0]
        for case in doc["cases"]:
            row = _measure_case(pool, case, args)
            rows.append(row)
            p = row["params"]
            print(f"{p['m']}x{p['n']}x{p['k']}: best {row.get('best_graph_us')} us "
                  f"({row.get('best_tb_s', 0):.2f} TB/s) cuBLAS {row['cublas_graph_us']} us "
                  f"({row.get('cublas_tb_s', 0):.2f} TB/s) ratio {row.get('ratio_graph')} "
                  f"best {row.get('best')} [{time.perf_counter() - started:.0f} s]", flush=True)
            write_json(args.out, {"fingerprint": fingerprint, **tree_state(), "rows": rows})
    ratios = [r["ratio_graph"] for r in rows if r.get("ratio_graph")]
    write_json(args.out, {"fingerprint": fingerprint, **tree_state(), "rows": rows,
                          "geomean_ratio_graph": geomean(ratios)})
    print(f"geomean ratio (graph) {geomean(ratios):.3f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--shapes", nargs="+", default=list(SHAPES))
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--top", type=int, default=24, help="cost-model picks per shape")
    p.add_argument("--grid", choices=("few", "mid", "fitted", "split"), default="few",
                   help="few: decode's few-tile levers; mid: the middle of a range over m; "
                        "fitted: tiles sized to fill whole waves there; split: split-K "
                        "over clusters beside the few-tile levers")
    p.add_argument("--pool", type=int, default=400)
    p.add_argument("--out", default=str(ROOT / ".bench" / "decode-designs.json.gz"))
    r = sub.add_parser("run")
    r.add_argument("--candidates", default=str(ROOT / ".bench" / "decode-designs.json.gz"))
    r.add_argument("--samples", type=int, default=10)
    r.add_argument("--leaders", type=int, default=4)
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--deadline", type=float, default=30.0)
    r.add_argument("--cache", default="/tmp/pipetune-cubins")
    r.add_argument("--out", default=str(ROOT / "bench" / "results" / "decode-designs.json"))
    args = parser.parse_args(argv)
    prepare(args) if args.step == "prepare" else run(args)


if __name__ == "__main__":
    main()
