"""Clustered GEMM kernels against single blocks, and the variants that tell why.

For the warp-specialised design (and a thin one for 128 rows), on three shapes, timed side
by side in one worker (two rounds, the workers' timing with L2 flush): single blocks; the
same kernel with ``__cluster_dims__`` only (no multicast: the cost of co-scheduling pairs);
pairs along m and n with multicast; the same with the consumers' remote releases at
cluster scope (``.release.cluster``) instead of the default; and persistent pairs on
fewer blocks than SMs (whether every pair finds its SMs at once).

    PYTHONPATH=. python3 bench/gemm_cluster_probe.py --out $OUT/gemm-cluster-probe.json
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import dated_result, tree_state, write_json  # noqa: E402

SHAPES = ((8192, 8192, 8192, "kn"), (4096, 4096, 4096, "nk"), (128, 8192, 8192, "nk"))
DEFAULT_RELEASE = "mbarrier.arrive.shared::cluster.b64"
CLUSTER_RELEASE = "mbarrier.arrive.release.cluster.shared::cluster.b64"


def _variants(spec: Any, device: Any) -> list[tuple[str, Any]]:
    from codegen import render
    from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED
    from scheduler_search.sprogram import plan_sprogram

    design = dict(GEMM_WARP_SPECIALIZED)
    if spec.m <= 128:
        design |= {"tile_m": 64, "tile_n": 128, "tile_k": 128, "consumer_warpgroups": 1,
                   "persistent": False}
    base = render(plan_sprogram(spec, device, design), spec, device)
    dims = base.source.replace('extern "C" __global__ void __launch_bounds__',
                               'extern "C" __global__ void __cluster_dims__(2, 1, 1) '
                               "__launch_bounds__")
    out = [("single blocks", base),
           ("cluster dims only", dataclasses.replace(base, source=dims, cluster=(2, 1, 1)))]
    for axis in ("m", "n"):
        paired = render(plan_sprogram(spec, device, {**design, "cluster_size": 2,
                                                     "cluster_axis": axis}), spec, device)
        out.append((f"pairs along {axis}", paired))
        slow = paired.source.replace(DEFAULT_RELEASE, CLUSTER_RELEASE)
        out.append((f"pairs along {axis}, release.cluster",
                    dataclasses.replace(paired, source=slow)))
        if paired.grid[0] == device.sm_count:
            for blocks in (120, 64):
                out.append((f"pairs along {axis}, {blocks} blocks",
                            dataclasses.replace(paired, grid=(blocks, 1, 1))))
    return out


def run(args: argparse.Namespace) -> None:
    from scheduler_search.hardware import get_device
    from scheduler_search.ops.gemm import GemmSpec
    from workers import Job, LocalGpuPool, ParallelCompiler, TimingConfig

    device = get_device("h200")
    timing = TimingConfig(warmup_launches=3, warmup_ms=10.0, min_samples=20, min_time_ms=30.0)
    names, jobs = [], []
    for m, n, k, layout in SHAPES:
        spec = GemmSpec(m=m, n=n, k=k, dtype="float16", b_layout=layout)
        for name, artifact in _variants(spec, device):
            names.append(f"{m}x{n}x{k} {layout}: {name}")
            jobs.append(Job({"op": "gemm", "params": spec.params()}, artifact=artifact,
                            timing=timing, seed=1, deadline_s=30.0))
    with LocalGpuPool(compiler=ParallelCompiler(cache_dir=args.cache),
                      codegen_version="probe") as pool:
        rounds = [pool.measure(jobs) for _ in range(args.rounds)]
    cases = []
    for i, name in enumerate(names):
        first = rounds[0][i]
        cases.append({"case": name, "status": first.status.value, "rel_error": first.rel_error,
                      "latency_us": [r[i].latency_us for r in rounds], "error": first.error})
        print(f"{name:55s} {first.status.value:8s} {cases[-1]['latency_us']}", flush=True)
    write_json(args.out, {**tree_state(), "suite": "gemm cluster probe", "cases": cases})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cache", default="/tmp/pipetune-probe-cubins")
    parser.add_argument("--out", default=dated_result("gemm-cluster-probe"))
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
