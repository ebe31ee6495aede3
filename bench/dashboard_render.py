"""How fast the dashboard's pages answer with a full database: 1,000 runs, 100,000 trials.

Fills a fresh database (a SQLite file by default; ``--database-url`` for an empty
PostgreSQL schema) through SQLAlchemy Core bulk inserts: 500 GEMM workloads x 2 simulated
devices, one run each (most succeeded, with their best schedule in the cache: real
sPrograms built by the schedule space); each run that has started has 90 trials and one
big run has the rest of the 100,000 (about 12,000), with realistic choices, a third
measured and the rest rejected or failed, as a search produces them. Then starts the app
in-process (``TestClient``, the run manager idle) and times each page's server response,
the JSON the page loads included, as the median of ``--repeat`` page views after two
warm-up views. The budget is 300 ms per page; this is a benchmark, not a test: it
reports, it does not assert.

    .venv/bin/python bench/dashboard_render.py --out bench/results/dashboard-2026-11-29.json
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import platform
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BUDGET_MS = 300.0
SIZES = (512, 1024, 2048, 4096, 8192)
DEVICES = ("sim:h200", "sim:h100")
TRIALS_PER_RUN = 90
TOTAL_TRIALS = 100_000  # 90 per run, the rest to one big run
#: A schedule valid for every suite shape (the best of a 32-trial search at 1024^3).
TEMPLATE_CHOICES = {
    "tile_m": 64, "tile_n": 128, "tile_k": 32, "warp_specialized": True,
    "consumer_warpgroups": 1, "producer_regs": 40, "stages_ab": 6, "order": "overlap",
    "map_store": "cuda_core", "persistent": True, "raster_major": "n", "raster_swizzle": 4,
}
ERRORS = (
    "smem_exceeded: 245840 B of shared memory > 232448 B",
    "unsupported_on_arch: codegen: b_layout=kn needs tile_n % 64 == 0 (tile_n=96)",
    "registers_exceeded: 288 registers per consumer thread > budget 240",
    "wgmma_shape: tile_m=192 is not a multiple of 64 per consumer warpgroup",
)


def _workloads() -> list[tuple[str, dict[str, Any]]]:
    from scheduler_search.ops import parse_spec

    found = []
    for m, n, k in itertools.product(SIZES, SIZES, SIZES):
        for dtype, layout in itertools.product(("float16", "bfloat16"), ("kn", "nk")):
            spec = parse_spec("gemm", {"m": m, "n": n, "k": k, "dtype": dtype,
                                       "b_layout": layout})
            found.append((spec.workload_key(), spec.params()))
    return found


def _choice_pool(rng: random.Random) -> list[dict[str, Any]]:
    from scheduler_search.hardware import get_device
    from scheduler_search.ops import parse_spec
    from scheduler_search.space import ScheduleSpace

    space = ScheduleSpace(parse_spec("gemm", {"m": 4096, "n": 4096, "k": 4096,
                                              "dtype": "float16"}), get_device("h200"))
    pool = list(itertools.islice(space.structural_choices(), 20_000))
    rng.shuffle(pool)
    for choices in pool:
        choices.update(raster_major=rng.choice("mn"), raster_swizzle=rng.choice((1, 2, 4, 8)))
    return pool[:2000]


def _statuses(rng: random.Random, count: int) -> list[str]:
    """Run statuses in the proportions a busy server shows; the last (the big run)
    succeeded."""
    statuses = []
    for _ in range(count):
        roll = rng.random()
        statuses.append("succeeded" if roll < 0.85 else "failed" if roll < 0.90 else
                        "cancelled" if roll < 0.95 else "interrupted" if roll < 0.98
                        else "queued")
    statuses[-1] = "succeeded"  # the big run, last (newest)
    return statuses


def _trial_rows(rng: random.Random, run_id: int, count: int, begun: Any, elapsed: float,
                scale: float, pool: list[dict[str, Any]]) -> tuple[list[dict], int, float, Any]:
    """A run's ``count`` trials (a third measured, most of the rest invalid points);
    with how many were measured, the best latency and its schedule hash."""
    rows, measured, best_latency, best_hash = [], 0, float("inf"), None
    for number in range(count):
        kind = rng.random()
        row = {
            "run_id": run_id, "number": number, "source": "search",
            "choices": pool[rng.randrange(len(pool))], "predicted_us": None,
            "simulated": True, "error": None, "measurement": None,
            "schedule_hash": None, "latency_us": None,
            "created_at": begun + datetime.timedelta(seconds=elapsed * number / count),
        }
        if kind < 0.33:
            latency = scale * rng.uniform(4, 30)
            digest = f"{rng.getrandbits(256):064x}"
            row.update(status="ok", latency_us=latency, predicted_us=latency,
                       schedule_hash=digest)
            measured += 1
            if latency < best_latency:
                best_latency, best_hash = latency, digest
        elif kind < 0.95:
            row.update(status="invalid", error=rng.choice(ERRORS))
        else:
            row.update(status=rng.choice(("compile_error", "timeout", "wrong_result")),
                       error="simulated failure for the benchmark")
        rows.append(row)
    return rows, measured, best_latency, best_hash


def _run_row(run_id: int, workload_id: int, device_id: int, status: str, count: int,
             measured: int, best: tuple[float, Any], times: tuple[Any, Any, float]
             ) -> dict[str, Any]:
    """The run's row; ``times`` is (created, begun, elapsed seconds)."""
    (best_latency, best_hash), (created, begun, elapsed) = best, times
    finished = status not in ("queued", "running")
    has_best = best_hash is not None and status != "failed"
    return {
        "id": run_id, "workload_id": workload_id, "device_id": device_id, "status": status,
        "budget_trials": count, "budget_seconds": None, "patience": None, "seed": 0,
        "study_name": f"pipetune-run-{run_id}", "trials_done": measured,
        "invalid": count - measured if status != "queued" else 0,
        "best_latency_us": best_latency if has_best else None,
        "best_schedule_hash": best_hash if has_best else None,
        "best_kernel_hash": None, "best_simulated": True if has_best else None,
        "phase": "done" if finished else "queued",
        "stop_reason": "trials" if status == "succeeded" else None,
        "error": "no candidate was measured successfully" if status == "failed" else None,
        "cancel_requested": status == "cancelled", "owner": None, "heartbeat_at": None,
        "attempts": 0 if status == "queued" else 1,
        "elapsed_s": elapsed if status != "queued" else 0.0, "created_at": created,
        "started_at": begun if status != "queued" else None,
        "finished_at": begun + datetime.timedelta(seconds=elapsed) if finished else None,
    }


def _template(templates: dict[tuple[str, str], dict[str, Any]], workload: tuple[str, dict],
              device: str) -> dict[str, Any]:
    """The sProgram JSON a cache entry of ``workload`` on ``device`` stores (built once)."""
    from scheduler_search.hardware import get_device
    from scheduler_search.ops import parse_spec
    from scheduler_search.space import ScheduleSpace

    key = (workload[0], device)
    if key not in templates:
        space = ScheduleSpace(parse_spec("gemm", workload[1]), get_device(device))
        templates[key] = space.build(TEMPLATE_CHOICES)[0].to_dict()
    return templates[key]


def _rows(rng: random.Random, workloads: list[tuple[str, dict]], now: Any
          ) -> tuple[list[dict], list[dict], list[dict], int]:
    """Runs, trials and cache entries for every (workload, device); the big run's trials."""
    pool = _choice_pool(rng)
    templates: dict[tuple[str, str], dict[str, Any]] = {}
    runs, schedules, trials = [], [], []
    pairs = [(w, d) for w in range(len(workloads)) for d in range(len(DEVICES))]
    statuses = _statuses(rng, len(pairs))
    # A queued run has no trials yet: the big run takes the rest of the 100,000.
    with_trials = sum(1 for s in statuses[:-1] if s != "queued")
    big_trials = TOTAL_TRIALS - TRIALS_PER_RUN * with_trials
    for run_index, (w, d) in enumerate(pairs):
        run_id, status = run_index + 1, statuses[run_index]
        count = big_trials if run_index == len(pairs) - 1 else TRIALS_PER_RUN
        created = now - datetime.timedelta(minutes=10 * (len(pairs) - run_index))
        begun = created + datetime.timedelta(seconds=rng.uniform(0.1, 5))
        elapsed = count * rng.uniform(0.05, 0.3)
        params = workloads[w][1]
        scale = params["m"] * params["n"] * params["k"] / 1e9
        rows, measured, best_latency, best_hash = _trial_rows(
            rng, run_id, count if status != "queued" else 0, begun, elapsed, scale, pool)
        trials += rows
        runs.append(_run_row(run_id, w + 1, d + 1, status, count, measured,
                             (best_latency, best_hash), (created, begun, elapsed)))
        if status == "succeeded":
            schedules.append({
                "workload_id": w + 1, "device_id": d + 1, "schedule_hash": best_hash,
                "schedule": _template(templates, workloads[w], DEVICES[d]),
                "choices": TEMPLATE_CHOICES, "latency_us": best_latency,
                "predicted_us": best_latency, "simulated": True, "run_id": run_id,
                "kernel_hash": None, "created_at": begun,
                "updated_at": begun + datetime.timedelta(seconds=elapsed),
            })
    return runs, trials, schedules, big_trials


def fill(url: str, seed: int = 0) -> dict[str, Any]:
    """Migrate ``url`` and insert the benchmark's rows; what was inserted."""
    from sqlalchemy import insert

    from service.core.db import Database
    from service.db import schema
    from service.db.models import (
        DeviceModel,
        RunModel,
        ScheduleModel,
        TrialModel,
        WorkloadModel,
        utcnow,
    )
    from service.runs.devices import simulated

    rng = random.Random(seed)
    db = Database(url)
    schema.migrate(db)
    now = utcnow()
    started = time.perf_counter()
    workloads = _workloads()
    with db.engine.begin() as connection:
        devices = [simulated(name) for name in DEVICES]
        connection.execute(insert(DeviceModel), [
            {"id": i + 1, "key": d.key, "name": d.name, "kind": d.kind,
             "simulated": d.simulated, "identity": d.identity, "created_at": now}
            for i, d in enumerate(devices)
        ])
        connection.execute(insert(WorkloadModel), [
            {"id": i + 1, "key": key, "op": "gemm", "params": params, "created_at": now}
            for i, (key, params) in enumerate(workloads)
        ])
        runs, trials, schedules, big_trials = _rows(rng, workloads, now)
        connection.execute(insert(RunModel), runs)
        for start in range(0, len(trials), 20_000):
            connection.execute(insert(TrialModel), trials[start : start + 20_000])
        connection.execute(insert(ScheduleModel), schedules)
    db.dispose()
    return {
        "runs": len(runs), "trials": len(trials), "schedules": len(schedules),
        "workloads": len(workloads), "big_run_id": len(runs), "big_run_trials": big_trials,
        "fill_s": round(time.perf_counter() - started, 1),
    }


def _time(client: Any, urls: list[str], repeat: int) -> dict[str, Any]:
    """Median and p95 over ``repeat`` rounds of fetching ``urls`` (one page view)."""
    for _ in range(2):
        for url in urls:
            assert client.get(url).status_code == 200, url
    samples = []
    for _ in range(repeat):
        begin = time.perf_counter()
        for url in urls:
            response = client.get(url)
            assert response.status_code == 200, (url, response.status_code)
        samples.append((time.perf_counter() - begin) * 1000)
    samples.sort()
    median = statistics.median(samples)
    return {
        "requests": urls,
        "median_ms": round(median, 2),
        "p95_ms": round(samples[min(len(samples) - 1, int(0.95 * len(samples)))], 2),
        "min_ms": round(samples[0], 2),
        "n": repeat,
        "within_budget": median < BUDGET_MS,
    }


def measure(url: str, filled: dict[str, Any], repeat: int) -> dict[str, dict[str, Any]]:
    from fastapi.testclient import TestClient

    from service.core.config import Settings
    from service.main import create_app

    settings = Settings(database_url=url, data_dir=Path(tempfile.gettempdir()))
    big, big_trials = filled["big_run_id"], filled["big_run_trials"]
    with TestClient(create_app(settings, run_background=False)) as client:
        typical = client.get("/v1/runs", params={"status": "succeeded", "limit": 1,
                                                 "offset": 400}).json()["data"][0]["id"]
        entry = client.get("/v1/schedules", params={"limit": 1}).json()["data"][0]["id"]

        def run_page(run_id: int) -> list[str]:
            # What the browser asks for when it opens a run page.
            return [f"/runs/{run_id}", f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/convergence",
                    f"/v1/runs/{run_id}/trials?order=number&limit=50&offset=0",
                    f"/v1/runs/{run_id}/importance", f"/v1/runs/{run_id}/timeline"]

        pages = {
            "runs list (/)": ["/"],
            "runs list, live refresh (/runs/table)": ["/runs/table"],
            "runs list filtered (op, status, device)":
                ["/?op=gemm&status=succeeded&device=sim%3Ah200"],
            "runs list, page 20": ["/?page=20"],
            f"run page, {TRIALS_PER_RUN} trials (HTML + run + convergence + trials + "
            "importance + timeline JSON)": run_page(typical),
            f"run page, {big_trials} trials (HTML + run + convergence + trials + "
            "importance + timeline JSON)": run_page(big),
            f"trials sorted by latency, page 100 of the {big_trials}-trial run":
                [f"/v1/runs/{big}/trials?order=latency_us&limit=50&offset=5000"],
            "schedules page (/schedules)": ["/schedules"],
            "schedules page, shape search": ["/schedules?op=gemm&device=sim%3Ah200&shape=m%3D4096"],
            "schedule page (HTML + timeline JSON)":
                [f"/schedules/{entry}", f"/v1/schedules/{entry}/timeline"],
        }
        # First requests of the cached computations, measured apart (once each).
        first = {}
        for name, path in ((f"importance, first request ({big_trials} trials)",
                            f"/v1/runs/{big}/importance"),
                           ("timeline, first request", f"/v1/runs/{typical}/timeline")):
            begin = time.perf_counter()
            assert client.get(path).status_code == 200
            first[name] = round((time.perf_counter() - begin) * 1000, 2)
        results = {name: _time(client, urls, repeat) for name, urls in pages.items()}
        results["uncached first requests (ms)"] = first  # type: ignore[assignment]
    return results


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except Exception:
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=None,
                        help="default: a fresh SQLite file in a temporary folder")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    from service.main import quiet_optuna

    quiet_optuna()
    with tempfile.TemporaryDirectory() as scratch:
        url = args.database_url or f"sqlite:///{Path(scratch) / 'dashboard-bench.db'}"
        filled = fill(url)
        size = None
        if url.startswith("sqlite:///"):
            size = os.path.getsize(url.removeprefix("sqlite:///"))
        print(f"filled {filled['runs']} runs, {filled['trials']} trials, "
              f"{filled['schedules']} schedules in {filled['fill_s']} s")
        results = measure(url, filled, args.repeat)
    report = {
        "benchmark": "dashboard page render time (server side, in-process TestClient)",
        "date": datetime.date.today().isoformat(),
        "commit": _commit(),
        "budget_ms": BUDGET_MS,
        "database": "sqlite" if url.startswith("sqlite") else "postgresql",
        "database_bytes": size,
        "sqlite_version": sqlite3.sqlite_version,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "filled": filled,
        "pages": results,
    }
    width = max(len(name) for name in results)
    for name, value in results.items():
        if "median_ms" in value:
            mark = "ok" if value["within_budget"] else "OVER BUDGET"
            print(f"{name:<{width}}  median {value['median_ms']:8.2f} ms  "
                  f"p95 {value['p95_ms']:8.2f} ms  {mark}")
        else:
            print(f"{name:<{width}}  {value}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
