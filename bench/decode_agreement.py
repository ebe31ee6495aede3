"""Why a decode run's stored speedup and ``bench/decode.py``'s graph ratio disagree: one
case's kernel and peer timed both ways, and ways in between, in one process.

On the H200 (2026-12-04) FP8 cases of 5-13 us stored speedups 5-10% above the bench's
graph ratio: pipetune's kernel read 7-12% slower in the bench than in the run, the peer
1-3% (``decode-fp8-llama-3-8b-mixtral-m64-256-partial-2026-12-04.json``). The two differ in
what a launch reads and in what the GPU did just before:

- ``bench``: as ``bench/decode.py`` times it: one replay of a graph of ``--graph-calls``
  calls over weight copies (the activation and scales shared, each call allocating its
  output), the replay started ``--cool-down-s`` after the GPU went idle;
- ``bench_busy``: the same replay enqueued behind a GPU sleep (clocks up, the replay's
  launch off the timed path);
- ``worker``: the service's graph timing (``workers.graph_timing.time_graph_replays``,
  a spin kernel before each sample) over copies of every input, one output shared, as a
  run's worker times it;
- ``worker_bench_inputs``: the service's timing over the bench's calls.

Each figure is the median of ``--rounds``; a row per case and label goes to stdout as
JSON, and all of them to ``--out``.

    PYTHONPATH=. python3 bench/decode_agreement.py --results bench/results/decode-....json \\
        --cases gemm-128x6144x4096-fp8-nk --out $OUT/decode-agreement.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import write_json  # noqa: E402
from bench.decode import gemm_calls, random_operand, random_scales, weight_copies  # noqa: E402
from bench.decode_profile import artifact_of, stored_cases  # noqa: E402
from bench.launch_overhead import capture, replay_us  # noqa: E402
from scheduler_search.ops import DTYPE_BYTES  # noqa: E402

#: GPU cycles of the sleep a busy replay is enqueued behind (about 1 ms at ~2 GHz).
BUSY_CYCLES = 2_000_000


def busy_replay_us(torch: Any, graph: Any, calls: int) -> float:
    """One replay's time per call, enqueued behind a GPU sleep."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(BUSY_CYCLES)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def worker_us(calls: list[Callable[[], Any]]) -> float:
    """The service's graph figure of ``calls`` (one per operand copy): its samples' median."""
    from workers.graph_timing import time_graph_replays
    from workers.protocol import GRAPH, TimingConfig

    return statistics.median(time_graph_replays(calls, TimingConfig(method=GRAPH)))


def copied_calls(torch: Any, kernel: Any, case: dict[str, Any], copies: int) -> dict[str, list]:
    """Each label's calls over ``copies`` copies of every input, one output shared (as a
    run's worker binds them)."""
    p = case["params"]
    m, n, k, dtype = p["m"], p["n"], p["k"], p["dtype"]
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    calls: dict[str, list] = {"pipetune": [], "peer": []}
    for _ in range(copies):
        a, w = random_operand(torch, (m, k), dtype), random_operand(torch, (n, k), dtype)
        scales = random_scales(torch, dtype)
        if scales is None:
            calls["pipetune"].append(lambda a=a, w=w: kernel(a, w, c=out))
            calls["peer"].append(lambda a=a, w=w: torch.matmul(a, w.t(), out=out))
            continue
        sa, sb = scales
        calls["pipetune"].append(lambda a=a, w=w, sa=sa, sb=sb: kernel(a, w, sa, sb, c=out))
        calls["peer"].append(lambda a=a, w=w, sa=sa, sb=sb: torch._scaled_mm(
            a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, out=out))
    return calls


def idle_replay_us(torch: Any, graph: Any, calls: int, idle_s: float) -> float:
    """One replay's time per call after ``idle_s`` of idle GPU (``bench/decode.py``'s)."""
    torch.cuda.synchronize()
    time.sleep(idle_s)
    return replay_us(torch, graph, calls)


def label_figures(torch: Any, cycle: list[Callable[[], Any]], copied: list[Callable[[], Any]],
                  args: argparse.Namespace) -> dict[str, float]:
    """Each way's median over ``args.rounds`` for one label: ``cycle`` its calls as the
    bench makes them, ``copied`` as a run's worker does."""
    for call in cycle + copied:  # first calls (new signatures) untimed
        call()
    calls = len(cycle) * max(1, -(-args.graph_calls // len(cycle)))
    order = itertools.cycle(cycle)
    graph, _ = capture(torch, lambda: next(order)(), calls)
    ways: dict[str, Callable[[], float]] = {
        "bench": lambda: idle_replay_us(torch, graph, calls, args.cool_down_s),
        "bench_busy": lambda: busy_replay_us(torch, graph, calls),
        "worker": lambda: worker_us(copied),
        "worker_bench_inputs": lambda: worker_us(cycle),
    }
    return {f"{way}_us": statistics.median(measure() for _ in range(args.rounds))
            for way, measure in ways.items()}


def case_rows(torch: Any, case: dict[str, Any], args: argparse.Namespace,
              l2_bytes: int) -> list[dict[str, Any]]:
    """Every way's figure of the case's kernel and peer (microseconds a call)."""
    import pipetune

    p = case["params"]
    m, n, k, dtype = p["m"], p["n"], p["k"], p["dtype"]
    kernel = pipetune.load(artifact_of(case))
    copies = weight_copies(n * k * DTYPE_BYTES[dtype], l2_bytes)
    a, scales = random_operand(torch, (m, k), dtype), random_scales(torch, dtype)
    weights = [random_operand(torch, (n, k), dtype) for _ in range(copies)]
    bench_calls = [gemm_calls(torch, kernel, a, w, scales) for w in weights]
    copied = copied_calls(torch, kernel, case, copies)
    rows = []
    for label in ("pipetune", "peer"):
        figures = label_figures(torch, [c[label] for c in bench_calls], copied[label], args)
        rows.append({"case": case["case"], "label": label, "weight_copies": copies,
                     **figures})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, required=True,
                        help="a bench/decode.py results file")
    parser.add_argument("--cases", nargs="*", default=[], help="case names (default: all)")
    parser.add_argument("--graph-calls", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cool-down-s", type=float, default=0.2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    import torch

    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    rows = [row for case in stored_cases(args.results, args.cases)
            for row in case_rows(torch, case, args, l2_bytes)]
    if args.out:
        write_json(args.out, {"results": str(args.results), "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
