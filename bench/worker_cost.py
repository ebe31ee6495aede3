"""What one candidate costs the GPU measurement engine, and candidates per second per GPU.

For a typical kernel (the hand-written tiled GEMM of ``workers.testing``; ``--candidates``
distinct sources, so every compile is real), measures:

  - compile: NVRTC time per candidate and the wall time of the batch's parallel compile;
  - verify: module load + argument setup + one checked launch, per candidate (worker side);
  - time: the timing loop per candidate, for the default ``TimingConfig`` and a quick one;
  - the wall time of ``LocalGpuPool.measure`` on the batch (compile cache warm), giving
    candidates per second per GPU, with and without the compile stage;
  - the cuBLAS baseline on the same shape, for scale.

Writes JSON to ``--out`` (default ``$OUT/worker_cost.json``, else
``bench/results/worker_cost-<date>.json``) and prints a short table.

    PYTHONPATH=. python3 bench/worker_cost.py --candidates 32 --size 2048
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from workers import Job, LocalGpuPool, Measurement, ParallelCompiler, TimingConfig
from workers.device import arch_of
from workers.testing import gemm_tiled_artifact

QUICK_TIMING = TimingConfig(warmup_launches=2, warmup_ms=0.0, min_samples=20, min_time_ms=0.0)


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def _summary(results: list[Measurement], wall_s: float, gpus: int) -> dict[str, Any]:
    ok = [r for r in results if r.status.is_ok()]
    return {
        "statuses": sorted({r.status.value for r in results}),
        "ok": len(ok),
        "wall_s": wall_s,
        "candidates_per_s_per_gpu": len(results) / wall_s / gpus,
        "verify_wall_ms_mean": _mean([r.verify_wall_ms for r in ok]),
        "timing_wall_ms_mean": _mean([r.timing_wall_ms for r in ok]),
        "samples_mean": _mean([float(len(r.samples_us)) for r in ok]),
        "latency_us_median": statistics.median(r.latency_us for r in ok) if ok else None,
        "latency_iqr_us_median": statistics.median(r.iqr_us for r in ok) if ok else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=32)
    parser.add_argument("--size", type=int, default=2048, help="GEMM m = n = k (fp16)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    params = {"m": args.size, "n": args.size, "k": args.size, "dtype": "float16", "b_layout": "kn"}
    workload = {"op": "gemm", "params": params}
    artifacts = [gemm_tiled_artifact(params, variant=i) for i in range(args.candidates)]

    with tempfile.TemporaryDirectory() as cache_dir:
        compiler = ParallelCompiler(cache_dir=cache_dir)
        with LocalGpuPool(compiler=compiler, codegen_version="bench") as pool:
            gpus = pool.capacity()
            fingerprint = pool.fingerprints[0]
            arch = arch_of(fingerprint) if fingerprint else "90"
            requests = [(a.source, tuple(a.compile_options)) for a in artifacts]

            start = time.perf_counter()
            compiled = compiler.compile_many(requests, arch)
            compile_wall_s = time.perf_counter() - start

            runs: dict[str, dict[str, Any]] = {}
            for name, timing in (
                ("default_timing", TimingConfig()),
                ("quick_timing", QUICK_TIMING),
            ):
                jobs = [Job(workload=workload, artifact=a, timing=timing) for a in artifacts]
                pool.measure(jobs[:1])  # inputs and reference built once per workload
                start = time.perf_counter()
                results = pool.measure(jobs)
                runs[name] = _summary(results, time.perf_counter() - start, gpus)
                runs[name]["timing"] = timing.to_dict()
                runs[name]["end_to_end_candidates_per_s_per_gpu"] = (
                    args.candidates / (runs[name]["wall_s"] + compile_wall_s) / gpus
                )
            (cublas,) = pool.measure([Job(workload=workload, baseline="cublas")])

    report = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "fingerprint": fingerprint,
        "gpus": gpus,
        "cpu_count": os.cpu_count(),
        "kernel": "workers.testing.gemm_tiled_artifact",
        "params": params,
        "candidates": args.candidates,
        "compile": {
            "ok": sum(c.ok for c in compiled),
            "nvrtc_ms_mean": _mean([c.compile_ms for c in compiled]),
            "batch_wall_s": compile_wall_s,
            "parallel_workers": compiler.max_workers,
        },
        **runs,
        "cublas": {"status": cublas.status.value, "latency_us": cublas.latency_us},
    }
    out = args.out
    if out is None:
        out_dir = os.environ.get("OUT")
        stamp = datetime.date.today().isoformat()
        out = (
            Path(out_dir) / "worker_cost.json"
            if out_dir
            else Path(f"bench/results/worker_cost-{stamp}.json")
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))

    comp = report["compile"]
    device = fingerprint["name"] if fingerprint else "?"
    print(f"{device}: {gpus} GPU(s), {args.candidates} candidates, GEMM {args.size}^3 fp16")
    print(
        f"compile: {comp['nvrtc_ms_mean']:.0f} ms NVRTC per candidate, "
        f"batch {comp['batch_wall_s']:.2f} s on {comp['parallel_workers']} processes"
    )
    for name in ("default_timing", "quick_timing"):
        run = runs[name]
        print(
            f"{name}: verify {run['verify_wall_ms_mean']:.1f} ms, "
            f"time {run['timing_wall_ms_mean']:.1f} ms ({run['samples_mean']:.0f} samples), "
            f"{run['candidates_per_s_per_gpu']:.2f} cand/s/GPU "
            f"(with compile {run['end_to_end_candidates_per_s_per_gpu']:.2f}), "
            f"median {run['latency_us_median']:.1f} us, statuses {run['statuses']}"
        )
    print(f"cuBLAS: {cublas.latency_us} us ({cublas.status.value}); report: {out}")


if __name__ == "__main__":
    main()
