"""Where a freshly started machine's first measurement spends its time, step by step.

A first decode tune on a freshly started H200 reported its first kernel 15.6 s after the
request (2026-12-04), where the same tune on a machine that had run anything before took
~7 s, and the rounds after the first took 0.4 s for 16 trials: something is paid once a
machine. This probe runs a worker's first decode job one step at a time in a fresh
process, with CuPy's kernel cache and the driver's JIT cache in a new folder (empty for
``cold``, the cold pass's for ``warm``), and times each step: CuPy's import and context,
the worker's start, NVRTC's compile of the first design, the first measurement (inputs, reference,
check, graph timing), a second design's, and the cuBLAS peer's. The cold pass also keeps
cProfile's costliest functions and when each CuPy kernel landed in its cache.

    PYTHONPATH=. python3 bench/cold_start.py --out $OUT/cold_start.json
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import tree_state, write_json  # noqa: E402

#: The decode case of the slow first tune.
PARAMS = {"m": 1, "n": 4096, "k": 4096, "dtype": "bfloat16", "b_layout": "nk"}


def _steps(profile_first: bool) -> dict[str, Any]:
    """One pass in this process: each step's seconds, and the first measurement's profile."""
    times: dict[str, float] = {}
    started = time.perf_counter()

    def step(name: str, work: Any) -> Any:
        t = time.perf_counter()
        value = work()
        times[name] = round(time.perf_counter() - t, 3)
        print(f"{name}: {times[name]} s", flush=True)
        return value

    step("import_cupy", lambda: __import__("cupy").cuda.Device(0).use())
    from codegen import render
    from scheduler_search.hardware import get_device
    from scheduler_search.ops.gemm import GemmSpec
    from scheduler_search.space.designs import decode_designs
    from scheduler_search.sprogram import plan_sprogram
    from workers import Job, TimingConfig
    from workers.compile import compile_to_cache
    from workers.worker import GpuWorker

    spec, device = GemmSpec(**PARAMS), get_device("h200")
    designs = decode_designs(spec)[:2]  # a search's first round
    artifacts = [render(plan_sprogram(spec, device, d), spec, device) for d in designs]
    worker = step("worker_start", lambda: GpuWorker(0, "bench-cold-start"))
    with tempfile.TemporaryDirectory() as cubins:
        compiled = [step(f"nvrtc_compile_{i}", lambda a=a: compile_to_cache(
            a.source, tuple(a.compile_options), cubins, "90a"))
            for i, a in enumerate(artifacts)]
        graph = TimingConfig(warmup_launches=2, warmup_ms=0.0, min_samples=20,
                             min_time_ms=0.0, method="graph")
        workload = {"op": "gemm", "params": PARAMS}
        jobs = [Job(workload, artifact=a, timing=graph) for a in artifacts]
        profile = cProfile.Profile() if profile_first else None
        if profile is not None:
            profile.enable()
        first = step("first_measure", lambda: worker.measure(jobs[0], compiled[0]))
        if profile is not None:
            profile.disable()
        second = step("second_measure", lambda: worker.measure(jobs[1], compiled[1]))
        peer = step("cublas_peer", lambda: worker.measure(
            Job(workload, baseline="cublas", timing=graph), None))
    result: dict[str, Any] = {
        "seconds": times, "total_s": round(time.perf_counter() - started, 3),
        "statuses": [m.status.value for m in (first, second, peer)],
        "latencies_us": [m.latency_us for m in (first, second, peer)]}
    if profile is not None:
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(40)
        result["first_measure_profile"] = text.getvalue().splitlines()
    return result


def _kernel_cache_timeline(folder: Path, since: float) -> list[tuple[float, str]]:
    """Each file written to the kernel caches: seconds after ``since``, name."""
    files = [p for p in folder.rglob("*") if p.is_file()]
    return sorted((round(p.stat().st_mtime - since, 3), p.name) for p in files)


def _pass(name: str, cache: Path) -> dict[str, Any]:
    """Runs one pass in a fresh interpreter with CuPy's and the driver's caches in ``cache``."""
    env = {**os.environ, "CUPY_CACHE_DIR": str(cache / "cupy"),
           "CUDA_CACHE_PATH": str(cache / "driver")}
    started = time.time()
    out = subprocess.run([sys.executable, __file__, "--one-pass", name], env=env,
                         capture_output=True, text=True, timeout=600, check=False)
    sys.stderr.write(out.stderr[-4000:])
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"error": out.stdout[-2000:]}
    result["process_wall_s"] = round(time.time() - started, 3)
    if name == "cold":
        result["kernel_caches"] = _kernel_cache_timeline(cache, started)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", ".") + "/cold_start.json")
    parser.add_argument("--one-pass", choices=("cold", "warm"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one_pass:
        print(json.dumps(_steps(profile_first=args.one_pass == "cold")))
        return
    with tempfile.TemporaryDirectory() as cache:
        passes = {name: _pass(name, Path(cache)) for name in ("cold", "warm")}
    write_json(args.out, {**tree_state(), "params": PARAMS, "passes": passes})
    for name, result in passes.items():
        print(name, result.get("seconds"), result.get("process_wall_s"))


if __name__ == "__main__":
    main()
