"""Where generated attention stands against cuDNN and FlashAttention-2, on a few shapes.

A probe, not the suite benchmark: for each shape, the cost model's ``--top`` schedules of
the lowerable attention space are checked against the fp32 reference and timed (quick
timing) on the GPU; the fastest is re-timed (final timing) in the same worker process as
PyTorch's SDPA with the cuDNN and the FlashAttention-2 backend forced. Prints one JSON
line per shape and writes them to ``$OUT/attn_probe.json`` (or ``--out``).

    PYTHONPATH=. python3 bench/attention_probe.py --top 16
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SHAPES: tuple[dict[str, Any], ...] = (
    {"batch": 1, "heads": 32, "kv_heads": 8, "seq_q": 2048, "seq_kv": 2048, "head_dim": 128,
     "causal": True, "dtype": "float16"},
    {"batch": 8, "heads": 32, "kv_heads": 8, "seq_q": 2048, "seq_kv": 2048, "head_dim": 128,
     "causal": False, "dtype": "float16"},
    {"batch": 8, "heads": 16, "kv_heads": 16, "seq_q": 4096, "seq_kv": 4096, "head_dim": 64,
     "causal": False, "dtype": "float16"},
)


def probe(pool: Any, params: dict[str, Any], top: int) -> dict[str, Any]:
    from codegen import feasibility, render
    from scheduler_search.hardware import get_device
    from scheduler_search.ops import parse_spec
    from scheduler_search.space import ScheduleSpace, rank_top
    from workers import Job, TimingConfig

    quick = TimingConfig(warmup_launches=2, warmup_ms=0.0, min_samples=10, min_time_ms=0.0)
    final = TimingConfig(warmup_launches=3, warmup_ms=10.0, min_samples=30, min_time_ms=20.0)
    device = get_device("h200")
    spec = parse_spec("attention", params)
    space = ScheduleSpace(spec, device, feasibility("attention", device))
    candidates, _ = space.enumerate()
    ranked = rank_top(space, candidates, top)
    workload = {"op": "attention", "params": spec.params()}
    artifacts = [render(r.sprogram, spec, device) for r in ranked]
    measured = pool.measure([Job(workload, artifact=a, timing=quick, deadline_s=20)
                             for a in artifacts])
    ok = [(m.latency_us, i) for i, m in enumerate(measured) if m.status.value == "ok"]
    record: dict[str, Any] = {
        "params": params, "ok": len(ok),
        "failed": [m.status.value for m in measured if m.status.value != "ok"],
    }
    if not ok:
        return record
    best_us, best = min(ok)
    mine, cudnn, fa2 = pool.measure([
        Job(workload, artifact=artifacts[best], timing=final),
        Job(workload, baseline="sdpa_cudnn", timing=final),
        Job(workload, baseline="sdpa_flash", timing=final),
    ])
    record.update(best_quick_us=best_us, mine_us=mine.latency_us, cudnn_us=cudnn.latency_us,
                  fa2_us=fa2.latency_us, vs_cudnn=cudnn.latency_us / mine.latency_us,
                  vs_fa2=fa2.latency_us / mine.latency_us,
                  best=ranked[best].sprogram.choices)
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=16)
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."),
                                                      "attn_probe.json"))
    args = parser.parse_args(argv)
    from workers import LocalGpuPool, ParallelCompiler

    records = []
    with LocalGpuPool(compiler=ParallelCompiler(cache_dir="/tmp/pipetune-cubins"),
                      codegen_version="bench-attention-probe") as pool:
        for params in SHAPES:
            records.append(probe(pool, params, args.top))
            print(json.dumps(records[-1]), flush=True)
    Path(args.out).write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
