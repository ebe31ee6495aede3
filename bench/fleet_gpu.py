"""The fleet on one GPU machine: the same GEMM tuned through RayGpuPool and through
LocalGpuPool, and the GPU node killed mid-run.

A Ray head (``workers.ray_cluster.LoopbackCluster``) and this machine's GPUs as a Ray node
(``pipetune node start --node-ip-address 127.0.0.2``, which registers them in a fresh
database) back a service process with ``PIPETUNE_EXECUTOR=ray``. Runs of one GEMM, each
with the same time budget:

1. cold, from an empty cache: on the fleet device (``fleet:<key>``, measured by the
   RayGpuPool's actor on the node), then on ``cuda:0`` (a LocalGpuPool in this process);
   each executor starts at its run, each with an empty CuPy kernel cache;
2. warm (``force``, the executors running, as in a long-lived service): fleet, local,
   local, fleet, fleet, local, pooled per executor;
3. the same fixed lists of candidates (drawn from the GEMM's space) through both warm
   executors, alternating which goes first: candidates per second without the searches'
   paths, which differ between two runs as their timings steer them;
4. on the fleet device again: the node is killed once the run has measured, started
   again two seconds later, and the run must finish.

Reported per run: the best kernel's speed against cuBLAS (the run's own baseline), the
candidates measured per second (and from the first trial on, the steady rate; the first
trial's delay is the executor's start-up), the trials by status, for fleet runs what each
chunk cost beyond the GPU's own measuring (``dispatch``); and the fleet's figures
over the local pool's, cold and warm (the issue's bar: speeds within 2%, candidates per
second within 10%). ``--simulate`` runs the same walk on simulated GPUs (no GPU needed; a
rehearsal). Writes ``--out``.

    PYTHONPATH=. python3 bench/fleet_gpu.py --out $OUT/fleet_gpu.json

On a GPU machine without Ray or internet: bring Ray's cp312 wheel unpacked and slimmed
(``ray/jars``, ``ray/dashboard/client`` and the libraries ``rllib``, ``data``, ``serve``,
``train``, ``tune``, ``llm`` removed: about 28 MB as tar.xz) with the wheels of its
dependencies (click, filelock, jsonschema and its referencing stack, msgpack, protobuf,
pyyaml, requests and its stack) and pipetune's; unpack the tar into the same target
folder as the wheels, put a ``ray`` script on PATH that calls
``ray.scripts.scripts.main``, and the folder on PYTHONPATH (2026-12-01 on the lent H200:
Ray 2.60.0, 41 MB of carry in all).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import dated_result, tree_state, write_json  # noqa: E402

NODE_IP = "127.0.0.2"
GEMM = {"m": 4096, "n": 4096, "k": 4096, "dtype": "float16"}


def _start_node(address: str, url: str, simulate: bool) -> None:
    """This machine's GPUs (or one simulated H100) as a Ray node, through the launcher."""
    from service.cli import main as cli

    offer = ["--no-gpus", "--simulate", "h100"] if simulate else []
    assert cli(["node", "start", "--address", address, "--node-ip-address", NODE_IP,
                "--database-url", url, *offer]) == 0


def _run(client: Any, device: str, seconds: float, **extra: Any) -> int:
    body = {"op": "gemm", "params": GEMM, "device": device, "budget": {"seconds": seconds},
            **extra}
    answer = client.post("/v1/tune", json=body)
    assert answer.status_code == 202, answer.text
    return answer.json()["run"]["id"]


def _wait(client: Any, run_id: int, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        run = client.get(f"/v1/runs/{run_id}").json()
        if run["status"] not in ("queued", "running"):
            return run
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id} still {run['status']}")
        time.sleep(0.2)


def _summary(client: Any, run: dict[str, Any]) -> dict[str, Any]:
    trials = client.get(f"/v1/runs/{run['id']}/trials", params={"limit": 10000}).json()["data"]
    statuses = collections.Counter(t["status"] for t in trials)
    elapsed = max(run["elapsed_s"], 1e-9)
    return {"run": run["id"], "device": run["device"], "status": run["status"],
            "best_us": run["best"]["latency_us"] if run["best"] else None,
            "baseline_us": run["baseline_latency_us"],
            "speedup_vs_cublas": run["speedup_vs_baseline"], "trials": len(trials),
            "statuses": dict(statuses), "elapsed_s": elapsed,
            "candidates_per_s": statuses.get("ok", 0) / elapsed,
            **_timeline(run, trials),
            "stop_reason": run["stop_reason"], "error": run["error"]}


def _timeline(run: dict[str, Any], trials: list[dict[str, Any]]) -> dict[str, Any]:
    """When the first trial was recorded (seconds after the run started: the executor's
    start-up, the baseline, the first batch's compiles) and the rate from then on."""
    def at(stamp: str) -> float:
        return datetime.datetime.fromisoformat(stamp).timestamp()

    if not trials or not run.get("started_at"):
        return {"first_trial_s": None, "steady_candidates_per_s": None}
    stamps = sorted(at(t["created_at"]) for t in trials if t["status"] == "ok")
    if len(stamps) < 2:
        return {"first_trial_s": None, "steady_candidates_per_s": None}
    return {"first_trial_s": stamps[0] - at(run["started_at"]),
            "steady_candidates_per_s": (len(stamps) - 1) / max(stamps[-1] - stamps[0], 1e-9)}


def _lose_node_mid_run(client: Any, cluster: Any, device: str, args: argparse.Namespace,
                       url: str) -> dict[str, Any]:
    run_id = _run(client, device, args.seconds, force=True)
    deadline = time.monotonic() + 120
    while not client.get(f"/v1/runs/{run_id}/trials").json()["data"]:
        if time.monotonic() > deadline:
            raise TimeoutError("the third run measured nothing")
        time.sleep(0.1)
    killed = time.perf_counter()
    cluster.kill_node(NODE_IP)
    time.sleep(2.0)
    _start_node(cluster.address, url, args.simulate)
    restarted_s = time.perf_counter() - killed
    run = _wait(client, run_id, args.seconds + 300)
    return {**_summary(client, run), "node_back_after_s": restarted_s}


def _dispatch(client: Any, key: str) -> dict[str, float]:
    """The fleet executor's dispatch cost so far (``GET /v1/devices``)."""
    device = next(d for d in client.get("/v1/devices").json()["data"] if d["key"] == key)
    return device.get("dispatch") or {"chunks": 0, "round_trip_s": 0.0, "actor_s": 0.0}


def _dispatch_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """One run's chunks through the actors and what each cost beyond measuring."""
    delta = {k: after[k] - before[k] for k in ("chunks", "round_trip_s", "actor_s")}
    delta["overhead_per_chunk_s"] = ((delta["round_trip_s"] - delta["actor_s"])
                                     / delta["chunks"] if delta["chunks"] else 0.0)
    return delta


def _candidate_lists(model: Any, simulated: bool, lists: int, size: int) -> list[list[Any]]:
    """``lists`` disjoint lists of ``size`` jobs of the GEMM's schedule space, drawn with a
    fixed seed: generated kernels timed as a search times them (schedules where the
    executors are simulated)."""
    import random

    from scheduler_search.ops import parse_spec
    from scheduler_search.search import SEARCH_TIMING
    from service.runs.jobs import kernel_job
    from service.runs.space import schedule_space
    from workers import Job

    spec = parse_spec("gemm", GEMM)
    workload = {"op": "gemm", "params": spec.params()}
    candidates, _ = schedule_space(spec, model).enumerate()
    drawn = random.Random(11).sample(candidates, lists * size)

    def job(candidate: Any) -> Any:
        if simulated:
            return Job(workload=workload, schedule=candidate.sprogram.to_dict())
        return kernel_job(candidate.sprogram, spec, model, workload, 11, SEARCH_TIMING)

    return [[job(c) for c in drawn[i * size:(i + 1) * size]] for i in range(lists)]


def _measure_list(executor: Any, jobs: list[Any]) -> dict[str, float]:
    """``jobs`` through ``executor`` batch by batch as a run goes (the next batch handed to
    ``prepare`` before this one is measured): seconds and correct candidates a second."""
    width = max(1, executor.batch_size())
    batches = [jobs[i:i + width] for i in range(0, len(jobs), width)]
    started = time.perf_counter()
    executor.prepare(batches[0])
    ok = 0
    for index, batch in enumerate(batches):
        if index + 1 < len(batches):
            executor.prepare(batches[index + 1])
        ok += sum(1 for m in executor.measure(batch) if m.status.value == "ok")
    seconds = time.perf_counter() - started
    return {"ok": ok, "seconds": seconds, "candidates_per_s": ok / seconds}


def _same_candidates(registry: Any, keys: dict[str, str], model: Any, simulated: bool,
                     lists: int = 3, size: int = 48) -> dict[str, Any]:
    """The same fixed candidates through the fleet's executor and the local pool (the
    service's own, warm), list by list, the first executor alternating: their rates
    without the searches' own paths (two tuning runs measure different kernels).

    Each list goes once through the local pool untimed first (``primed``): both
    executors' compilers share this process's CuPy cache, so otherwise whichever went
    first paid the list's compiles (1.7-1.9 s against 1.0 s on the H200, either way)."""
    executors = {name: registry.running(key) for name, key in keys.items()}
    rounds = []
    for index, jobs in enumerate(_candidate_lists(model, simulated, lists, size)):
        primed = _measure_list(executors["local"], jobs)
        order = ("ray", "local") if index % 2 == 0 else ("local", "ray")
        rounds.append({"primed": primed} | {name: _measure_list(executors[name], jobs)
                                            for name in order})
    rate = {name: sum(r[name]["ok"] for r in rounds) / sum(r[name]["seconds"] for r in rounds)
            for name in keys}
    return {"lists": rounds, "candidates_per_s": rate,
            "fleet_over_local": rate["ray"] / rate["local"]}


def _empty_caches(work: Path, name: str) -> None:
    """An empty CuPy kernel cache for the processes started from now on: CuPy compiles
    its own kernels (the inputs, the reference check) on first use, and the second cold
    run would otherwise find the first's (about 10 s on the H200). The pools' cubins are
    apart already: the local pool's under the service's ``data_dir``, an actor's in its
    compiler's default folder."""
    os.environ["CUPY_CACHE_DIR"] = str(work / f"cupy-{name}")


def run(args: argparse.Namespace) -> None:
    import ray
    from fastapi.testclient import TestClient

    from service.core.config import Settings
    from service.main import create_app
    from service.runs.devices import resolve_device
    from workers.ray_cluster import LoopbackCluster

    os.environ["RAY_AUTH_MODE"] = "disabled"
    work = Path(tempfile.mkdtemp(prefix="pipetune-fleet-"))
    url = f"sqlite:///{work / 'pipetune.db'}"
    cluster = LoopbackCluster()
    cluster.node_ips.add(NODE_IP)
    result: dict[str, Any] = {"date": datetime.datetime.now(datetime.UTC).isoformat(
        timespec="seconds"), "suite": "fleet on one GPU", **tree_state(),
        "simulated": args.simulate, "seconds_per_run": args.seconds, "gemm": GEMM}
    try:
        _empty_caches(work, "fleet")  # the node's processes inherit it at ray start
        _start_node(cluster.address, url, args.simulate)
        # No executor warmed at the service's start: each starts at its first (cold) run,
        # with its own CuPy cache, so the cold pair compares the two executors' start-up.
        settings = Settings(database_url=url, data_dir=work, executor="ray",
                            ray_address=cluster.address, seed=11, heartbeat_s=1.0,
                            warm_executors=False)
        with TestClient(create_app(settings)) as client:
            fleet = next(d for d in client.get("/v1/devices").json()["data"]
                         if d["kind"] == "fleet")
            result["fleet_device"] = {k: fleet[k] for k in ("name", "key", "available")}
            local = "sim:h100" if args.simulate else "cuda:0"
            runs = {}
            # First from cold (each executor starts at its first run), then again with
            # the executors warm, as a long-lived service has them.
            # Warm runs alternate, three pairs, so that drift of the machine (and the
            # search's own path, which the timings steer) falls on both.
            for name, device, force in (("ray", fleet["name"], False),
                                        ("local", local, False),
                                        ("ray_warm", fleet["name"], True),
                                        ("local_warm", local, True),
                                        ("local_warm_2", local, True),
                                        ("ray_warm_2", fleet["name"], True),
                                        ("ray_warm_3", fleet["name"], True),
                                        ("local_warm_3", local, True)):
                if name == "local":  # the local pool's worker starts now: its own caches
                    _empty_caches(work, "local")
                before = _dispatch(client, fleet["key"])
                runs[name] = _summary(client, _wait(client, _run(
                    client, device, args.seconds, force=force), 600))
                if device == fleet["name"]:
                    runs[name]["dispatch"] = _dispatch_delta(before,
                                                             _dispatch(client, fleet["key"]))
                print(json.dumps(runs[name]), flush=True)
            local_key = next(d["key"] for d in client.get("/v1/devices").json()["data"]
                             if d["name"] == local)
            result["same_candidates"] = _same_candidates(
                client.app.state.executors, {"ray": fleet["key"], "local": local_key},
                resolve_device(local).model, args.simulate)
            print(json.dumps(result["same_candidates"]), flush=True)
            runs["ray_node_lost"] = _lose_node_mid_run(client, cluster, fleet["name"], args,
                                                       url)
            print(json.dumps(runs["ray_node_lost"]), flush=True)
        result["runs"] = runs
        result["ratios"] = _ratios(runs["ray"], runs["local"])
        result["ratios_warm"] = _ratios(*(_pooled(runs, f"{kind}_warm") for kind in
                                          ("ray", "local")))
        print(json.dumps(result["ratios"]), flush=True)
    finally:
        ray.shutdown()
        cluster.close()
        write_json(args.out, result)


def _pooled(runs: dict[str, dict[str, Any]], prefix: str) -> dict[str, Any]:
    """The runs named ``prefix``*, as one: trials over time, the mean of the speeds."""
    mine = [r for name, r in runs.items() if name.startswith(prefix)]
    ok = sum(r["statuses"].get("ok", 0) for r in mine)

    def mean(key: str) -> float | None:  # None where a run has none (no baseline: simulated)
        values = [r[key] for r in mine]
        return None if None in values else statistics.mean(values)

    return {"candidates_per_s": ok / sum(r["elapsed_s"] for r in mine),
            "steady_candidates_per_s": mean("steady_candidates_per_s"),
            "speedup_vs_cublas": mean("speedup_vs_cublas"), "best_us": mean("best_us")}


def _ratios(ray_run: dict[str, Any], local: dict[str, Any]) -> dict[str, Any]:
    """The fleet's figures over the local pool's (1.0: the same)."""
    def ratio(key: str) -> float | None:
        a, b = ray_run.get(key), local.get(key)
        return a / b if a and b else None

    return {"speedup_vs_cublas": ratio("speedup_vs_cublas"), "best_us": ratio("best_us"),
            "candidates_per_s": ratio("candidates_per_s"),
            "steady_candidates_per_s": ratio("steady_candidates_per_s")}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=25.0, help="each run's budget")
    parser.add_argument("--simulate", action="store_true",
                        help="simulated GPUs: the same walk without a GPU")
    parser.add_argument("--out", default=dated_result("fleet_gpu"))
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
