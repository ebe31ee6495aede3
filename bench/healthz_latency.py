"""/healthz latency of ``pipetune serve`` while two simulated runs are active, with the
searches in the API's process (``--workers 0``) and in a worker process (``--workers 1``).

    python bench/healthz_latency.py [--requests 300]

Prints, for each mode, the median and 95th-percentile latency and the request rate of
sequential /healthz calls (no run active, then two runs active).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

_GEMMS = ({"m": 4096, "n": 4096, "k": 4096, "dtype": "float16"},
          {"m": 8192, "n": 8192, "k": 2048, "dtype": "float16"})


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _latencies(client: httpx.Client, count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        client.get("/healthz").raise_for_status()
        times.append(time.perf_counter() - started)
    return times


def _summary(times: list[float]) -> str:
    times = sorted(times)
    return (f"median {statistics.median(times) * 1e3:.1f} ms, p95 "
            f"{times[int(0.95 * len(times))] * 1e3:.1f} ms, {len(times) / sum(times):.0f} req/s")


def measure(workers: int, requests: int) -> None:
    port = _free_port()
    with tempfile.TemporaryDirectory() as data:
        env = {**os.environ, "PIPETUNE_DATA_DIR": data}
        server = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--workers",
             str(workers), "--log-level", "warning"], env=env, stderr=subprocess.DEVNULL)
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
        try:
            while True:
                try:
                    client.get("/healthz")
                    break
                except httpx.TransportError:
                    time.sleep(0.2)
            idle = _latencies(client, requests)
            for params in _GEMMS:
                client.post("/v1/tune", json={"op": "gemm", "params": params,
                                              "device": "sim:h200",
                                              "budget": {"trials": 10_000}}).raise_for_status()
            while sum(r["status"] == "running" for r in client.get("/v1/runs").json()["data"]) < 2:
                time.sleep(0.2)
            busy = _latencies(client, requests)
        finally:
            server.terminate()
            server.wait(60)
    print(f"--workers {workers}: idle {_summary(idle)}; 2 runs active {_summary(busy)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    for workers in (0, 1):
        measure(workers, args.requests)


if __name__ == "__main__":
    main()
