"""What measuring through a Ray actor costs per job, on this machine (no GPU).

The same stand-in pool (``workers.testing``: a LocalGpuPool whose worker process follows
the protocol and fakes its measurements) measures batches of jobs directly and through a
RayGpuPool actor on a local Ray instance; the difference per job is the fleet's dispatch
overhead (pickling the jobs and results, the actor call, the ping that finds live actors).
Batches of 1, 8 and 32 jobs, ``--rounds`` each, medians; writes
``bench/results/fleet_dispatch-<date>.json``.

    .venv/bin/python bench/fleet_dispatch.py
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import tree_state, write_json  # noqa: E402

BATCHES = (1, 8, 32)


def standin_pool() -> Any:
    """The pool both sides measure with (built in the actor's process for the fleet)."""
    from workers import LocalGpuPool
    from workers.testing import StandinCompiler, standin_worker_main

    return LocalGpuPool(["0"], worker_entry=standin_worker_main, compiler=StandinCompiler())


def _jobs(count: int, round_index: int) -> list[Any]:
    from workers import Job
    from workers.testing import standin_artifact

    workload = {"op": "gemm", "params": {"m": 64, "n": 64, "k": 64, "dtype": "float16"}}
    return [Job(workload, artifact=standin_artifact(name=f"r{round_index}j{i}"))
            for i in range(count)]


def _seconds_per_batch(pool: Any, count: int, rounds: int) -> list[float]:
    pool.measure(_jobs(count, -1))  # warm: the worker and the connection are up
    times = []
    for r in range(rounds):
        jobs = _jobs(count, r)
        started = time.perf_counter()
        results = pool.measure(jobs)
        times.append(time.perf_counter() - started)
        assert all(m.status.is_ok() for m in results), results
    return times


def run(args: argparse.Namespace) -> None:
    import ray

    from workers.executors.ray_pool import RayGpuPool

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    rows = []
    try:
        with standin_pool() as local, RayGpuPool(standin_pool, actors=1) as fleet:
            for count in BATCHES:
                direct = statistics.median(_seconds_per_batch(local, count, args.rounds))
                remote = statistics.median(_seconds_per_batch(fleet, count, args.rounds))
                rows.append({"jobs": count, "local_ms": direct * 1e3, "ray_ms": remote * 1e3,
                             "overhead_ms_per_job": (remote - direct) * 1e3 / count})
                print(f"{count:>3} jobs: local {direct * 1e3:7.2f} ms, through the actor "
                      f"{remote * 1e3:7.2f} ms, {rows[-1]['overhead_ms_per_job']:6.2f} ms/job",
                      flush=True)
            ping = statistics.median(_ping_seconds(fleet, args.rounds))
    finally:
        ray.shutdown()
    doc = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
           "suite": "fleet dispatch", **tree_state(), "ray_version": ray.__version__,
           "cpus": os.cpu_count(), "rounds": args.rounds, "ping_ms": ping * 1e3,
           "method": "the same stand-in pool measured directly and through one RayGpuPool "
                     "actor on a local Ray instance; medians of the batch wall times",
           "cases": rows}
    write_json(args.out, doc)
    print(f"ping of the live actors: {ping * 1e3:.2f} ms per measure call; wrote {args.out}")


def _ping_seconds(pool: Any, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        pool.live_actors()
        times.append(time.perf_counter() - started)
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    today = datetime.date.today().isoformat()
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" /
                                             f"fleet_dispatch-{today}.json"))
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
