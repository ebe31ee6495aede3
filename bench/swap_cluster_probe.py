"""Which swapped GEMM kernels sum wrong: swap-AB crossed with clusters, k steps, consumer
warpgroups, persistence, token tiles and loop order, each checked by the workers against
the reference on fresh random inputs.

The many-token decode grid (2026-12-04) found cost-model picks of swapped, clustered
schedules whose output missed the reference by 2-6%. This probe builds the product of
those levers at three decode shapes and reports each kernel's status and relative error,
so the space can refuse exactly what is wrong (``codegen/kernels/gemm.py``'s swap rules).

    PYTHONPATH=. python3 bench/swap_cluster_probe.py --out $OUT/swap-cluster-probe.json
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import dated_result, tree_state, write_json  # noqa: E402

#: The first wrong pick the grid met (128 x 7168 x 8192), the levers varied around it.
BASE: dict[str, Any] = {
    "cluster_axis": "m", "cluster_size": 2, "consumer_split": "cooperative",
    "consumer_warpgroups": 2, "map_store": "cuda_core", "order": "overlap",
    "persistent": False, "producer_regs": 40, "raster_major": "m", "raster_swizzle": 1,
    "stages_ab": 6, "swap_ab": True, "tile_k": 32, "tile_m": 32, "tile_n": 256,
    "warp_specialized": True, "wg_schedule": "free"}
SHAPES = ((128, 7168, 8192), (256, 4096, 4096), (16, 4096, 4096))


def variants() -> list[dict[str, Any]]:
    """The product of the levers around :data:`BASE`."""
    found = []
    for (size, axis), tile_k, consumers, persistent, tile_m, order in itertools.product(
            ((1, None), (2, "m"), (2, "n")), (32, 64), (1, 2), (False, True), (32, 64),
            ("overlap", "serial")):
        choices = {**BASE, "cluster_size": size, "cluster_axis": axis, "tile_k": tile_k,
                   "consumer_warpgroups": consumers, "tile_n": 128 * consumers,
                   "persistent": persistent, "tile_m": tile_m, "order": order}
        if size == 1:
            del choices["cluster_axis"]
        found.append(choices)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=dated_result("swap-cluster-probe"))
    args = parser.parse_args(argv)
    from codegen import feasibility, render
    from scheduler_search.hardware import get_device
    from scheduler_search.ops.gemm import GemmSpec
    from scheduler_search.space import ScheduleSpace
    from workers import Job, LocalGpuPool, ParallelCompiler, TimingConfig

    device = get_device("h200")
    built = []
    for m, n, k in SHAPES:
        spec = GemmSpec(m=m, n=n, k=k, dtype="bfloat16", b_layout="nk")
        space = ScheduleSpace(spec, device, feasibility("gemm", device))
        for choices in variants():
            sprogram, validity = space.build(choices)
            if validity.ok:
                built.append((spec, sprogram))
    print(f"{len(built)} kernels", flush=True)
    quick = TimingConfig(warmup_launches=1, warmup_ms=0.0, min_samples=2, min_time_ms=0.0)
    jobs = [Job({"op": "gemm", "params": spec.params()}, artifact=render(sp, spec, device),
                timing=quick, seed=3, deadline_s=30.0) for spec, sp in built]
    with LocalGpuPool(compiler=ParallelCompiler(cache_dir=tempfile.mkdtemp()),
                      codegen_version="bench-swap-cluster-probe") as pool:
        measured = pool.measure(jobs)
    rows = [{"params": spec.params(), "choices": sp.choices, "status": m.status.value,
             "rel_error": m.rel_error} for (spec, sp), m in zip(built, measured, strict=True)]
    for row in rows:
        if row["status"] != "ok":
            print(row["params"], row["status"], row["rel_error"], row["choices"], flush=True)
    write_json(args.out, {**tree_state(), "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
