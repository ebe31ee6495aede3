"""The fleet on this machine, without GPUs: what a job costs through a Ray actor, and what
losing a node costs.

**Dispatch.** The same stand-in pool (``workers.testing``: a LocalGpuPool whose worker
process follows the protocol and fakes its measurements) measures batches of 1, 8 and 32
jobs directly and through one RayGpuPool actor on a local Ray instance; the difference per
job is the fleet's dispatch overhead (pickling jobs and results, the actor call, the ping
that finds the live actors).

**A lost node.** On a ``LoopbackCluster`` (a head and two nodes on 127.0.0.2 and .3, each
offering one stand-in GPU), a batch of 20 jobs of 100 ms runs over the two actors once
whole, and once with the first node killed 0.3 s into it: how long Ray takes to see the
node dead, how much longer the batch takes (its lost chunk re-dispatched to the other
actor), and, the node started again, how long until its actor answers.

Medians over ``--rounds``; writes ``bench/results/fleet_local-<date>.json``.

    .venv/bin/python bench/fleet_local.py
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

from bench.common import dated_result, tree_state, write_json  # noqa: E402

BATCHES = (1, 8, 32)
NODE_IPS = ("127.0.0.2", "127.0.0.3")
LOSS_JOBS, LOSS_JOB_US, KILL_AFTER_S = 20, 100_000.0, 0.3


def standin_pool() -> Any:
    """The pool both sides measure with (built in the actor's process for the fleet)."""
    from workers import LocalGpuPool
    from workers.testing import StandinCompiler, standin_worker_main

    return LocalGpuPool(["0"], worker_entry=standin_worker_main, compiler=StandinCompiler())


def _jobs(count: int, tag: str, latency_us: float = 10.0) -> list[Any]:
    from workers import Job
    from workers.testing import standin_artifact

    workload = {"op": "gemm", "params": {"m": 64, "n": 64, "k": 64, "dtype": "float16"}}
    return [Job(workload, artifact=standin_artifact(latency_us=latency_us, name=f"{tag}j{i}"))
            for i in range(count)]


def _timed(pool: Any, jobs: list[Any]) -> float:
    started = time.perf_counter()
    results = pool.measure(jobs)
    elapsed = time.perf_counter() - started
    assert len(results) == len(jobs) and all(m.status.is_ok() for m in results), results
    return elapsed


def dispatch(rounds: int) -> dict[str, Any]:
    """Batch wall times directly and through one actor, on a local Ray instance."""
    import ray

    from workers.executors.ray_pool import RayGpuPool

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    rows = []
    try:
        with standin_pool() as local, RayGpuPool(standin_pool, actors=1) as fleet:
            for pool in (local, fleet):
                _timed(pool, _jobs(4, "warm"))  # the worker and the connection are up
            for count in BATCHES:
                direct = statistics.median(_timed(local, _jobs(count, f"l{r}"))
                                           for r in range(rounds))
                remote = statistics.median(_timed(fleet, _jobs(count, f"r{r}"))
                                           for r in range(rounds))
                rows.append({"jobs": count, "local_ms": direct * 1e3, "ray_ms": remote * 1e3,
                             "overhead_ms_per_job": (remote - direct) * 1e3 / count})
                print(f"{count:>3} jobs: local {direct * 1e3:7.2f} ms, through the actor "
                      f"{remote * 1e3:7.2f} ms, {rows[-1]['overhead_ms_per_job']:6.2f} ms/job",
                      flush=True)
            ping = statistics.median(_ping_seconds(fleet) for _ in range(rounds))
    finally:
        ray.shutdown()
    print(f"ping of the live actors: {ping * 1e3:.2f} ms per measure call", flush=True)
    return {"cases": rows, "ping_ms": ping * 1e3}


def node_loss(rounds: int) -> dict[str, Any]:
    """Detection, a batch's extra time and the actor's return, on a loopback cluster."""
    import threading

    import ray

    from workers.device import fingerprint_key
    from workers.executors.ray_pool import RayGpuPool, resource_name
    from workers.ray_cluster import LoopbackCluster
    from workers.testing import STANDIN_FINGERPRINT

    kind = fingerprint_key(STANDIN_FINGERPRINT)  # what the stand-in pool's GPU reports
    cluster = LoopbackCluster()
    node = ("ray", "start", "--address", cluster.address, "--num-cpus=1",
            "--resources", f'{{"{resource_name(kind)}": 1}}', "--node-ip-address")
    rows = []
    try:
        for ip in NODE_IPS:
            cluster.add_node((*node, ip))
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        with RayGpuPool(standin_pool, actors=2, device_key=kind) as pool:
            for r in range(rounds):
                whole = _timed(pool, _jobs(LOSS_JOBS, f"w{r}", LOSS_JOB_US))
                seen: dict[str, float] = {}
                killer = threading.Timer(KILL_AFTER_S, _lose, (cluster, NODE_IPS[0], seen))
                killer.start()
                lost = _timed(pool, _jobs(LOSS_JOBS, f"k{r}", LOSS_JOB_US))
                killer.join()
                cluster.add_node((*node, NODE_IPS[0]))
                back = _seconds_until(lambda: len(pool.live_actors(1.0)) == 2)
                rows.append({"batch_s": whole, "batch_with_loss_s": lost,
                             "extra_s": lost - whole, "detected_after_kill_s": seen["dead_s"],
                             "actor_back_after_restart_s": back})
                print(f"round {r}: batch {whole:.2f} s, with the node lost {lost:.2f} s "
                      f"(seen dead {seen['dead_s']:.2f} s after the kill); actor back "
                      f"{back:.2f} s after its node restarted", flush=True)
    finally:
        ray.shutdown()
        cluster.close()
    return {"rounds": rows, "jobs": LOSS_JOBS, "job_ms": LOSS_JOB_US / 1e3,
            "kill_after_s": KILL_AFTER_S,
            **{f"median_{k}": statistics.median(r[k] for r in rows)
               for k in ("extra_s", "detected_after_kill_s", "actor_back_after_restart_s")}}


def _lose(cluster: Any, ip: str, seen: dict[str, float]) -> None:
    """Kill the node at ``ip``; ``seen["dead_s"]``: how long until Ray reports it dead."""
    cluster.kill_node(ip)
    seen["dead_s"] = _seconds_until(lambda: not _alive(ip))


def _alive(ip: str) -> bool:
    import ray

    return any(n["NodeManagerAddress"] == ip and n["Alive"] for n in ray.nodes())


def _seconds_until(condition: Any, timeout_s: float = 120.0) -> float:
    started = time.perf_counter()
    while not condition():
        if time.perf_counter() - started > timeout_s:
            raise TimeoutError("the cluster did not get there")
        time.sleep(0.05)
    return time.perf_counter() - started


def _ping_seconds(pool: Any) -> float:
    started = time.perf_counter()
    pool.live_actors()
    return time.perf_counter() - started


def run(args: argparse.Namespace) -> None:
    import ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    # Both Ray instances of this process without a token (as LoopbackCluster's nodes):
    # one that held a token could not join the other.
    os.environ["RAY_AUTH_MODE"] = "disabled"
    doc = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
           "suite": "fleet on one machine", **tree_state(), "ray_version": ray.__version__,
           "cpus": os.cpu_count(), "rounds": args.rounds,
           "method": "stand-in pools (no GPU); medians of batch wall times",
           "dispatch": dispatch(args.rounds), "node_loss": node_loss(args.loss_rounds)}
    write_json(args.out, doc)
    print(f"wrote {args.out}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="dispatch rounds")
    parser.add_argument("--loss-rounds", type=int, default=3, help="node-loss rounds")
    parser.add_argument("--out", default=dated_result("fleet_local"))
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
