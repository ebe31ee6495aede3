"""Clustered chunk states against single blocks, at several persistent grid sizes.

For each chunk-state case of a ``bench/mamba2.py`` result, the fastest correct single-block
kernel and the fastest persistent clusters of 2 and of 4 (blocks of neighbouring heads
multicasting B) are launched with the grid the code generator chose and with smaller
ones (the kernels stride their tile loop by the grid they get): a grid that runs slower
than a smaller one holds clusters that do not all run at once. Each launch is checked
against the single-block kernel's states, then timed interleaved with the others
(L2 flushed before each launch, CUDA events, median of ``--reps``).

    PYTHONPATH=.:/tmp/site python3 bench/mamba2_cluster_probe.py \\
        --result RESULT.json --candidates CANDIDATES.json.gz --out bench/results/...
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import tree_state, write_json  # noqa: E402

CASES = ("state-8x4096-g1-fp16", "state16-1x16384-g1-fp16", "state16-8x4096-g1-fp16",
         "state16-64x4096-g1-fp16")
GRIDS = {2: (132, 130, 128, 126, 124, 120), 4: (132, 128, 124, 120, 116, 112, 104, 96)}
FLUSH_BYTES = 512 << 20


def _inputs(params: dict[str, Any]) -> tuple[Any, ...]:
    import torch

    batch, seqlen, heads = params["batch"], params["seqlen"], params["nheads"]
    chunk, chunks = params["chunk_size"], params["seqlen"] // params["chunk_size"]
    x = torch.randn(batch, seqlen, heads, params["headdim"], device="cuda",
                    dtype=torch.float16)
    b = torch.randn(batch, seqlen, params["ngroups"], params["dstate"], device="cuda",
                    dtype=torch.float16)
    dt = torch.rand(batch, heads, chunks, chunk, device="cuda") * 0.1
    da = -torch.rand(batch, heads, chunks, chunk, device="cuda").cumsum(-1) * 0.01
    return b, x, dt, da


def _median_us(kernels: dict[str, Any], inputs: tuple[Any, ...], reps: int) -> dict[str, float]:
    import torch

    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    samples: dict[str, list[float]] = {name: [] for name in kernels}
    for _ in range(reps):
        for name, kernel in kernels.items():
            flush.fill_(1)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            kernel(*inputs)
            end.record()
            torch.cuda.synchronize()
            samples[name].append(start.elapsed_time(end) * 1000.0)
    return {name: statistics.median(values) for name, values in samples.items()}


def _fastest(searched: list[dict[str, Any]], size: int) -> dict[str, Any] | None:
    ok = [s for s in searched if s["status"] == "ok"
          and s["choices"].get("cluster_size", 1) == size
          and (size == 1 or s["choices"].get("persistent"))]
    return min(ok, key=lambda s: s["latency_us"]) if ok else None


def probe_case(case: dict[str, Any], artifacts: dict[str, Any], reps: int) -> dict[str, Any]:
    from pipetune import load

    inputs = _inputs(case["params"])
    single = _fastest(case["searched"], 1)
    kernels = {"single": load(artifacts[single["hash"]])}
    reference = kernels["single"](*inputs).float()
    wrong = []
    for size, grids in GRIDS.items():
        best = _fastest(case["searched"], size)
        if best is None:
            continue
        for grid in grids:
            artifact = {**artifacts[best["hash"]], "grid": [grid, 1, 1]}
            kernel = load(artifact)
            states = kernel(*inputs).float()
            error = float((states - reference).norm() / reference.norm())
            if error > 1e-2:
                wrong.append({"cluster": size, "grid": grid, "rel_error": error})
                continue
            kernels[f"cluster{size}-grid{grid}"] = kernel
    return {"median_us": _median_us(kernels, inputs, reps), "wrong": wrong}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--result", required=True, help="a bench/mamba2.py result")
    parser.add_argument("--candidates", required=True, help="its prepared candidates")
    parser.add_argument("--reps", type=int, default=25)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    result = json.loads(Path(args.result).read_text())
    with gzip.open(args.candidates, "rt") as f:
        prepared = json.load(f)
    artifacts = {e["float16"]["hash"]: e["float16"]["artifact"]
                 for c in prepared["cases"] for e in c["candidates"]}
    doc: dict[str, Any] = {**tree_state(), "date": datetime.date.today().isoformat(),
                           "fingerprint": result.get("fingerprint"), "cases": {}}
    for case in result["cases"]:
        if case["case"] in CASES:
            doc["cases"][case["case"]] = probe_case(case, artifacts, args.reps)
            times = doc["cases"][case["case"]]["median_us"]
            print(case["case"], {k: round(v, 1) for k, v in times.items()}, flush=True)
    write_json(args.out, doc)


if __name__ == "__main__":
    main()
