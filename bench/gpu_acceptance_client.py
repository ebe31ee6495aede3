"""The service half of ``bench/gpu_acceptance.sh``: a user of a running ``pipetune serve``.

POST a GEMM spec, follow the run, fetch the kernel (``GET /v1/kernels/{hash}`` and its
source), ask again (a cache hit), then run the kernel on new inputs with
``workers.load`` and compare it with ``torch.matmul``.

    python3 bench/gpu_acceptance_client.py http://127.0.0.1:8000 OUT_DIR
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SPEC = {"op": "gemm", "params": {"m": 4096, "n": 4096, "k": 4096, "dtype": "float16"},
        "budget": {"trials": 64}}


def call(base: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data,
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def main(base: str, out: Path) -> int:
    deadline = time.monotonic() + 60
    while True:
        try:
            status, _ = call(base, "/healthz")
            if status == 200:
                break
        except OSError:
            pass
        if time.monotonic() > deadline:
            print("the server did not come up")
            return 1
        time.sleep(0.5)
    started = time.monotonic()
    status, body = call(base, "/v1/tune", SPEC)
    run = json.loads(body)
    print(f"POST /v1/tune -> {status}: run {run.get('id')} on {run.get('device')} "
          f"(simulated: {run.get('simulated')})")
    if status != 202:
        print(body.decode()[:2000])
        return 1
    while run["status"] in ("queued", "running"):
        time.sleep(1.0)
        run = json.loads(call(base, f"/v1/runs/{run['id']}")[1])
    elapsed = time.monotonic() - started
    best = run.get("best") or {}
    print(f"run {run['id']} {run['status']} after {elapsed:.1f} s: {run['trials_done']} "
          f"measured, stop {run['stop_reason']}, error {run['error']}")
    print(f"best {best.get('latency_us')} us, {run['baseline']} {run['baseline_latency_us']} us, "
          f"speedup_vs_baseline {run['speedup_vs_baseline']}, kernel {best.get('kernel_hash')}")
    if run["status"] != "succeeded" or not best.get("kernel_hash"):
        return 1
    status, kernel_body = call(base, f"/v1/kernels/{best['kernel_hash']}")
    (out / "kernel_api.json").write_bytes(kernel_body)
    artifact = json.loads(kernel_body)["artifact"]
    print(f"GET /v1/kernels/{{hash}} -> {status}: entry {artifact['entry']}, grid "
          f"{artifact['grid']}, block {artifact['block']}, smem {artifact['dynamic_smem_bytes']}"
          f" B, args {[a['name'] for a in artifact['args']]}")
    status, source = call(base, f"/v1/kernels/{best['kernel_hash']}/source")
    print(f"GET /v1/kernels/{{hash}}/source -> {status}: {len(source)} bytes, "
          f"{source.decode().splitlines()[0][:100]}")
    status, body = call(base, "/v1/tune", SPEC)
    cached = json.loads(body)
    print(f"POST /v1/tune again -> {status}: cached {cached.get('cached')}, kernel "
          f"{cached.get('kernel_hash')}, speedup_vs_baseline {cached.get('speedup_vs_baseline')}")

    # The user's side: the kernel on new inputs, with CuPy and torch only.
    import torch

    from workers import load

    gemm = load(kernel_body)
    generator = torch.Generator(device="cuda").manual_seed(2026)
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16, generator=generator)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16, generator=generator)
    c = gemm(a, b)
    reference = a.float() @ b.float()
    torch_c = torch.matmul(a, b)
    torch.cuda.synchronize()
    error = ((c.float() - reference).norm() / reference.norm()).item()
    torch_error = ((torch_c.float() - reference).norm() / reference.norm()).item()
    versus = ((c.float() - torch_c.float()).norm() / torch_c.float().norm()).item()
    print(f"workers.load: rel L2 error vs fp32 {error:.2e} (torch.matmul's own: "
          f"{torch_error:.2e}), vs torch.matmul {versus:.2e}; fp16 bound 1e-2: "
          f"{'PASS' if versus <= 1e-2 and error <= 1e-2 else 'FAIL'}")

    def time_us(fn, reps: int = 50) -> float:
        for _ in range(5):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) * 1e3 / reps

    out_c = torch.empty_like(c)
    mine = time_us(lambda: gemm(a, b, c=out_c))
    theirs = time_us(lambda: torch.matmul(a, b, out=torch_c))
    print(f"back-to-back through load() (warm L2, launch overhead included): {mine:.1f} us; "
          f"torch.matmul {theirs:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
