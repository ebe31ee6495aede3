"""The service under load: ``pipetune serve`` on a loopback port, load from this process.

For each database (a SQLite file; PostgreSQL in a schema of its own when reachable): seed
the cache with one finished run, start two long tuning runs on the simulated device, then

- mixed traffic (runs, schedules, a cache-hit tune, a run, a kernel, health) at
  concurrency 1, 64 and 256: requests per second, p50/p99, 5xx and timeouts;
- cached lookups alone (cache-hit ``POST /v1/tune``, ``GET /v1/schedules``,
  ``GET /v1/kernels/{hash}``) at concurrency 64;
- ``/healthz`` latency, one request at a time from a client of its own, while another
  process holds 500 event streams open.

Example:
    python bench/service_load.py --seconds 8 --out bench/results/service_load-2026-12-01.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, tree_state, write_json

SEED = {"op": "gemm", "params": {"m": 1024, "n": 1024, "k": 1024, "dtype": "float16"},
        "device": "sim:h200", "budget": {"trials": 16}}
TIMEOUT_S = 10.0
POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def _long_run(m: int) -> dict[str, Any]:
    return {"op": "gemm", "params": {"m": m, "n": 4096, "k": 4096, "dtype": "float16"},
            "device": "sim:h200", "budget": {"trials": 10_000, "seconds": 3600}}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start_server(url_file: Path, port: int, data_dir: Path) -> subprocess.Popen:
    env = {**os.environ, "PIPETUNE_DATA_DIR": str(data_dir), "PIPETUNE_MAX_CONCURRENT_RUNS": "2"}
    return subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(port),
         "--database-url-file", str(url_file), "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def _load(base: str, requests: list[tuple[str, str, Any]], concurrency: int,
                seconds: float) -> dict[str, Any]:
    """``concurrency`` clients cycling through ``requests`` for ``seconds``."""
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    timeouts = dropped = 0
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=TIMEOUT_S) as http:

        async def client(index: int) -> None:
            nonlocal timeouts, dropped
            while time.perf_counter() < deadline:
                method, path, body = requests[index % len(requests)]
                index += 1
                started = time.perf_counter()
                try:
                    response = await http.request(method, path, json=body)
                except httpx.TimeoutException:
                    timeouts += 1
                    continue
                except httpx.TransportError:  # a dropped connection: counted, not fatal
                    dropped += 1
                    continue
                latencies.append(time.perf_counter() - started)
                key = str(response.status_code)
                statuses[key] = statuses.get(key, 0) + 1

        started = time.perf_counter()
        await asyncio.gather(*(client(i) for i in range(concurrency)))
        wall = time.perf_counter() - started
    return _level("httpx", concurrency, latencies, wall, statuses, timeouts, dropped)


def _level(client: str, concurrency: int, latencies: list[float], wall_s: float,
           statuses: dict[str, int], timeouts: int, dropped: int) -> dict[str, Any]:
    """One load level's figures."""
    return {
        "client": client,
        "concurrency": concurrency,
        "requests": len(latencies),
        "req_per_s": round(len(latencies) / wall_s, 1),
        "p50_ms": round(_percentile(latencies, 0.50) * 1e3, 2),
        "p99_ms": round(_percentile(latencies, 0.99) * 1e3, 2),
        "statuses": statuses,
        "errors_5xx": sum(n for s, n in statuses.items() if s.startswith("5")),
        "timeouts": timeouts,
        "connections_dropped": dropped,
    }


def _status_counts(base: str) -> dict[str, float]:
    """The server's own request counts by status class (its Prometheus metrics)."""
    text = httpx.get(f"{base}/metrics", timeout=30).text
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("pipetune_http_requests_total{") and 'status="' in line:
            status = line.split('status="', 1)[1][0] + "xx"
            counts[status] = counts.get(status, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def _ab_load(base: str, requests: list[tuple[str, str, Any]], concurrency: int,
             seconds: float, scratch: Path) -> dict[str, Any]:
    """The same load from ApacheBench (C) processes, one per request kind sharing the
    ``concurrency``: a Python client at concurrency 64 spends more of these 2 cores than
    the server does. Latencies from ab's per-request log; statuses from the server's
    metrics; ab's "length" failures (answers that differ in size) are not errors."""
    before = _status_counts(base)
    processes = []
    for index, (method, path, body) in enumerate(requests):
        share = concurrency // len(requests) + (index < concurrency % len(requests))
        if share == 0:
            continue
        log = scratch / f"ab-{index}.tsv"
        command = ["ab", "-q", "-k", "-s", str(int(TIMEOUT_S)), "-t", str(max(1, round(seconds))),
                   "-n", "10000000", "-c", str(share), "-g", str(log)]
        if method == "POST":
            body_file = scratch / f"body-{index}.json"
            body_file.write_text(json.dumps(body))
            command += ["-p", str(body_file), "-T", "application/json"]
        processes.append((log, subprocess.Popen([*command, base + path], text=True,
                                                stdout=subprocess.PIPE)))
    latencies, errors, wall = [], 0, seconds
    for log, process in processes:
        out = process.communicate()[0]
        for line in out.splitlines():
            if line.startswith("Failed requests:") and "(" in line:
                kinds = line.split("(")[1].rstrip(")").split(",")
                parts = dict(kind.strip().split(": ") for kind in kinds)
                errors += sum(int(v) for k, v in parts.items() if k != "Length")
            if line.startswith("Time taken for tests:"):
                wall = max(wall, float(line.split(":")[1].split()[0]))
        rows = log.read_text().splitlines()[1:] if log.exists() else []
        latencies += [float(r.split("\t")[4]) / 1e3 for r in rows]
    after = _status_counts(base)
    statuses = {k: int(after.get(k, 0) - before.get(k, 0)) for k in after}
    return _level("ab", concurrency, latencies, wall, statuses, errors, 0)


async def _hold_streams(base: str, run_id: int, streams: int, ready: Path) -> None:
    """Open ``streams`` event streams of a run and read them until killed, writing how
    many opened to ``ready`` once they all have (run in a process of its own)."""
    limits = httpx.Limits(max_connections=streams + 8)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=None) as http:
        opened = 0

        async def watch() -> None:
            nonlocal opened
            async with http.stream("GET", f"/v1/runs/{run_id}/events") as response:
                opened += response.status_code == 200
                if opened >= streams:
                    ready.write_text(str(opened))
                async for _ in response.aiter_bytes():
                    pass

        await asyncio.gather(*(watch() for _ in range(streams)), return_exceptions=True)


def _health_with_streams(base: str, run_id: int, streams: int, samples: int,
                         scratch: Path) -> dict[str, Any]:
    """/healthz latency one at a time, from a client of its own (as a health checker is),
    while another process holds ``streams`` event streams open (their reading would
    otherwise delay this client's own event loop and count as server latency)."""
    ready = scratch / "streams-ready"
    ready.unlink(missing_ok=True)
    holder = subprocess.Popen(
        [sys.executable, __file__, "--hold-streams", base, str(run_id), str(streams),
         str(ready)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        opened = int(ready.read_text()) if ready.exists() else 0
        latencies, statuses = [], []
        with httpx.Client(base_url=base, timeout=30.0) as http:
            for _ in range(samples):
                started = time.perf_counter()
                response = http.get("/healthz")
                latencies.append(time.perf_counter() - started)
                statuses.append(response.status_code)
                time.sleep(0.01)
    finally:
        holder.terminate()
        holder.wait(30)
    return {"streams_open": opened, "samples": samples, "client": "separate process",
            "p50_ms": round(_percentile(latencies, 0.5) * 1e3, 2),
            "p99_ms": round(_percentile(latencies, 0.99) * 1e3, 2),
            "max_ms": round(max(latencies) * 1e3, 2),
            "non_200": sum(s != 200 for s in statuses)}


def _prepare(http: httpx.Client) -> tuple[int, str, list[int]]:
    """Seed the cache (the seed run's id and its kernel's hash), start two long runs."""
    seed = http.post("/v1/tune", json=SEED).json()
    seed_id = seed["run"]["id"]
    while http.get(f"/v1/runs/{seed_id}").json()["status"] in ("queued", "running"):
        time.sleep(0.2)
    kernel = http.get("/v1/schedules").json()["data"][0]["kernel_hash"]
    long_ids = [http.post("/v1/tune", json=_long_run(m)).json()["run"]["id"]
                for m in (8192, 16384)]
    time.sleep(1.0)
    return seed_id, kernel, long_ids


def bench_backend(url: str, seconds: float, streams: int, client: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        url_file = Path(tmp) / "url"
        url_file.write_text(url)
        port = _free_port()
        server = _start_server(url_file, port, Path(tmp))
        base = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(base_url=base, timeout=30) as http:
                for _ in range(300):
                    try:
                        if http.get("/healthz").status_code == 200:
                            break
                    except httpx.TransportError:
                        time.sleep(0.1)
                seed_id, kernel, long_ids = _prepare(http)
                active = [http.get(f"/v1/runs/{i}").json()["status"] for i in long_ids]

            def load(requests: list[tuple[str, str, Any]], concurrency: int) -> dict[str, Any]:
                if client == "ab" and concurrency >= len(requests):
                    return _ab_load(base, requests, concurrency, seconds, Path(tmp))
                return asyncio.run(_load(base, requests, concurrency, seconds))

            cached = [("POST", "/v1/tune", SEED), ("GET", "/v1/schedules", None),
                      ("GET", f"/v1/kernels/{kernel}", None)]
            mixed = [*cached, ("GET", "/v1/runs", None), ("GET", f"/v1/runs/{seed_id}", None),
                     ("GET", "/healthz", None)]
            out: dict[str, Any] = {"long_runs_status": active, "mixed": []}
            for concurrency in (1, 64, 256):
                out["mixed"].append(load(mixed, concurrency))
            out["cached_c64"] = load(cached, 64)
            out["healthz_with_streams"] = _health_with_streams(
                base, long_ids[0], streams, 200, Path(tmp))
            with httpx.Client(base_url=base, timeout=30) as http:
                out["long_runs_trials"] = [http.get(f"/v1/runs/{i}").json()["trials_done"]
                                           for i in long_ids]
            return out
        finally:
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()


def _postgres_schema() -> tuple[str, Any] | None:
    """A PostgreSQL URL in a new schema, and a function that drops it; None if absent."""
    from sqlalchemy import create_engine, text

    base = os.environ.get("PIPETUNE_TEST_POSTGRES_URL", POSTGRES)
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    try:
        admin = create_engine(base, isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    except Exception as exc:  # no server: SQLite only
        print(f"PostgreSQL skipped: {exc}", file=sys.stderr)
        return None

    def drop() -> None:
        with admin.connect() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()

    separator = "&" if "?" in base else "?"
    return f"{base}{separator}options=-csearch_path%3D{schema}", drop


def main() -> None:
    if sys.argv[1:2] == ["--hold-streams"]:  # the stream holder of _health_with_streams
        base, run_id, streams, ready = sys.argv[2:6]
        asyncio.run(_hold_streams(base, int(run_id), int(streams), Path(ready)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="per load level")
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--out", default=None)
    parser.add_argument("--backends", nargs="+", choices=("sqlite", "postgresql"),
                        default=["sqlite", "postgresql"], help="databases to serve from")
    parser.add_argument("--client", choices=("httpx", "ab"), default="httpx",
                        help="the load: Python's httpx in this process, or ApacheBench "
                             "processes (apt install apache2-utils) for concurrency >= the "
                             "request kinds (a C client leaves the CPU to the server)")
    args = parser.parse_args()
    if args.client == "ab" and shutil.which("ab") is None:
        parser.error("--client ab needs ApacheBench: apt install apache2-utils")
    results: dict[str, Any] = {"tree": tree_state(), "cpus": os.cpu_count(),
                               "seconds_per_level": args.seconds, "client": args.client,
                               "backends": {}}
    if "sqlite" in args.backends:
        with tempfile.TemporaryDirectory() as tmp:
            sqlite = f"sqlite:///{Path(tmp) / 'load.db'}"
            results["backends"]["sqlite"] = bench_backend(sqlite, args.seconds, args.streams,
                                                         args.client)
    postgres = _postgres_schema() if "postgresql" in args.backends else None
    if postgres is not None:
        url, drop = postgres
        try:
            results["backends"]["postgresql"] = bench_backend(url, args.seconds, args.streams,
                                                         args.client)
        finally:
            drop()
    for name, figures in results["backends"].items():
        for level in figures["mixed"]:
            print(f"{name} mixed c={level['concurrency']}: {level['req_per_s']} req/s, "
                  f"p99 {level['p99_ms']} ms, 5xx {level['errors_5xx']}, "
                  f"timeouts {level['timeouts']}, dropped {level['connections_dropped']}")
        cached, health = figures["cached_c64"], figures["healthz_with_streams"]
        print(f"{name} cached c=64: {cached['req_per_s']} req/s, p99 {cached['p99_ms']} ms; "
              f"healthz with {health['streams_open']} streams: p99 {health['p99_ms']} ms")
    if args.out:
        write_json(args.out, results)


if __name__ == "__main__":
    main()
