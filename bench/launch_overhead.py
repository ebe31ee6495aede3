"""What a tuned kernel costs where users call it: host time per call and the three GPU
ratios of docs/benchmarks.md, against the PyTorch call a user would otherwise make.

For each case a kernel is tuned in this process (``pipetune.tune``, ``--seconds`` of
search; a cached one answers at once) and loaded with ``pipetune.load``; then, in one
process on one GPU, for pipetune's callable ``f(a, b)`` and the peer (``torch.matmul(a, b)``
for GEMM, cuDNN's ``scaled_dot_product_attention`` for attention), each allocating its
output as a user's call does:

- ``host_us``: wall time per call of ``--calls`` calls issued back to back (the GPU queue
  absorbs them; nothing is synchronised in between): what the Python call costs the host;
- ``eager``: ``triton.testing.do_bench`` on the call, as a user times it;
- ``back_to_back``: CUDA events around ``--calls`` calls enqueued behind a GPU sleep, so
  the queue is full when they start (GPU time, whatever the host's pace),
  cycling through copies of the inputs that together exceed three times the L2 cache (as
  ThunderKittens' GEMM harness does), so each call starts from a cold L2 as under
  ``do_bench``'s flush, without timing a flush;
- ``graph``: the replay of a CUDA graph that captured ``--graph-calls`` calls (the graph's
  output is checked against an eager call's).

Ratios are peer time / pipetune time (> 1: pipetune faster); host ratio pipetune / peer.

The GPU figures are taken in interleaved rounds (pipetune then the peer, then the other
way round), each after ``--cool-down-s`` of idle GPU, and each figure is the median of
its rounds: on an H200 a sustained GEMM reaches the software power cap within a fraction
of a second (measured 2026-12-01: SM clock 1980 -> ~1455 MHz, "SW power cap" in
``nvidia-smi``'s clock event reasons, both for pipetune's kernel and cuBLAS), so a
figure timed right after another kernel's sustained run is timed at a lower clock, and
the two kernels of a ratio must be timed in the same state.

    PYTHONPATH=. python3 bench/launch_overhead.py --seconds 20 \\
        --out bench/results/launch_overhead-DATE.json
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import dated_result, geomean, tree_state, write_json  # noqa: E402

#: name -> (op, params): docs/benchmarks.md's launch-cost cases.
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "gemm-4096^3-fp16-kn": ("gemm", {"m": 4096, "n": 4096, "k": 4096, "dtype": "float16",
                                     "b_layout": "kn"}),
    "gemm-4000x6000x2000-bf16-nk": ("gemm", {"m": 4000, "n": 6000, "k": 2000,
                                             "dtype": "bfloat16", "b_layout": "nk"}),
    "gemm-128x8192x8192-fp16-kn": ("gemm", {"m": 128, "n": 8192, "k": 8192, "dtype": "float16",
                                            "b_layout": "kn"}),
    "attention-1x32(8)x2048x128-causal-bf16": ("attention", {
        "batch": 1, "heads": 32, "kv_heads": 8, "seq_q": 2048, "seq_kv": 2048, "head_dim": 128,
        "causal": True, "dtype": "bfloat16", "layout": "bhsd"}),
}


def peer_inputs(torch: Any, op: str, p: dict[str, Any]) -> tuple[tuple[Any, ...], Any]:
    """The kernel's inputs as torch tensors, and the peer's call on them."""
    dtype = getattr(torch, p["dtype"])
    if op == "gemm":
        a = torch.randn(p["m"], p["k"], device="cuda", dtype=dtype)
        b_shape = (p["k"], p["n"]) if p["b_layout"] == "kn" else (p["n"], p["k"])
        b = torch.randn(*b_shape, device="cuda", dtype=dtype)
        b_op = b if p["b_layout"] == "kn" else b.t()
        return (a, b), lambda: torch.matmul(a, b_op)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    q = torch.randn(p["batch"], p["heads"], p["seq_q"], p["head_dim"], device="cuda",
                    dtype=dtype)
    k, v = (torch.randn(p["batch"], p["kv_heads"], p["seq_kv"], p["head_dim"], device="cuda",
                        dtype=dtype) for _ in range(2))

    def peer() -> Any:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return scaled_dot_product_attention(q, k, v, is_causal=p["causal"],
                                                enable_gqa=True)

    return (q, k, v), peer


def host_us(torch: Any, call: Any, calls: int) -> float:
    """Median over 5 rounds of the wall time per call of ``calls`` unsynchronised calls."""
    rounds = []
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        rounds.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(rounds)


#: GPU cycles a back-to-back figure's queue is held per call it enqueues (50 us at ~2 GHz,
#: twice the most any Python call timed here costs the host).
HOLD_CYCLES_PER_CALL = 100_000


def back_to_back_us(torch: Any, copies: list[Any], calls: int) -> float:
    """GPU time per call, events around ``calls`` calls cycling through ``copies`` (calls
    on distinct input copies; every copy's first call, a new signature, comes before).

    The calls are enqueued behind a GPU sleep, so the queue is full when the first one
    starts and the figure is the GPU's pace, never the host's (a small kernel otherwise
    waits for each launch, and the figure becomes the host time per call, noisy and
    ``host_us``'s business). A sleep that ended before the last call was enqueued is
    taken again, four times longer."""
    for call in copies:
        call()
    hold = HOLD_CYCLES_PER_CALL * calls
    for _ in range(4):
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        torch.cuda._sleep(hold)
        start.record()
        for i in range(calls):
            copies[i % len(copies)]()
        end.record()
        held = not start.query()  # the sleep outlasted the enqueueing
        end.synchronize()
        if held:
            return start.elapsed_time(end) * 1e3 / calls
        hold *= 4
    raise RuntimeError(f"the host did not enqueue {calls} calls within a {hold} cycle sleep")


def copies_for_cold_l2(torch: Any, tensors: tuple[Any, ...]) -> int:
    """Input copies whose bytes exceed three times the L2 cache (at most 8: a loaded
    kernel keeps 16 argument signatures)."""
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    per_copy = sum(t.numel() * t.element_size() for t in tensors)
    return max(1, min(8, -(-3 * l2_bytes // per_copy)))


def capture(torch: Any, call: Any, calls: int) -> tuple[Any, Any]:
    """A CUDA graph of ``calls`` captured calls, replayed once, and its last output (to
    compare with an eager call's)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):  # warm-up on a side stream, as torch.cuda.graph asks
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            out = call()
    graph.replay()
    torch.cuda.synchronize()
    return graph, out


def replay_us(torch: Any, graph: Any, calls: int) -> float:
    """GPU time per call of one replay of a graph of ``calls`` captured calls."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def interleaved(torch: Any, timed: Any, rounds: int, cool_down_s: float) -> dict[str, list]:
    """``timed(label)`` for pipetune and the peer in ``rounds`` rounds, alternating which
    goes first, each after ``cool_down_s`` of idle GPU (the clock back from the power cap)."""
    samples: dict[str, list[float]] = {"pipetune": [], "peer": []}
    for index in range(rounds):
        order = ("pipetune", "peer") if index % 2 == 0 else ("peer", "pipetune")
        for label in order:
            torch.cuda.synchronize()
            time.sleep(cool_down_s)
            samples[label].append(timed(label))
    return samples


def three_figures(torch: Any, calls: dict[str, Any], cycled: dict[str, list[Any]],
                  counts: tuple[int, int], rounds: int, cool_down_s: float,
                  peer: str) -> dict[str, Any]:
    """Eager, back-to-back and graph figures of ``calls`` (labels ``pipetune`` and
    ``peer``; ``cycled``: each one's calls on distinct input copies), interleaved over
    ``rounds``: per figure the medians (microseconds, the peer's under ``peer``) and the
    ratio peer / pipetune. ``counts``: the calls per back-to-back figure and per graph."""
    from triton.testing import do_bench

    n_calls, n_graph = counts
    graphs = {label: capture(torch, call, n_graph)[0] for label, call in calls.items()}
    timed = {
        "eager": lambda label: do_bench(calls[label], return_mode="median") * 1e3,
        "back_to_back": lambda label: back_to_back_us(torch, cycled[label], n_calls),
        "graph": lambda label: replay_us(torch, graphs[label], n_graph),
    }
    row: dict[str, Any] = {}
    for figure, measure in timed.items():
        samples = interleaved(torch, measure, rounds, cool_down_s)
        ours_us, peer_us = (statistics.median(samples[x]) for x in ("pipetune", "peer"))
        row[f"{figure}_us"] = {"pipetune": ours_us, peer: peer_us}
        row[f"{figure}_ratio"] = peer_us / ours_us
    return row


def first_output(out: Any) -> Any:
    return out[0] if isinstance(out, tuple) else out


def measure(name: str, seconds: float, args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from triton.testing import do_bench

    import pipetune

    op, params = CASES[name]
    result = pipetune.tune(op, device="auto", budget={"seconds": seconds},
                           database_url=args.database_url, progress=False, **params)
    if result.kernel is None:
        return {"case": name, "error": f"no kernel: {result.status}"}
    kernel = pipetune.load(result.kernel)
    inputs, peer = peer_inputs(torch, op, params)
    ours = lambda: kernel(*inputs)  # noqa: E731 - the user's call
    copies = [(inputs, peer)] + [peer_inputs(torch, op, params) for _ in range(
        copies_for_cold_l2(torch, inputs) - 1)]
    cycled = {"pipetune": [lambda i=i: kernel(*i) for i, _ in copies],
              "peer": [p for _, p in copies]}
    eager_ref = first_output(ours()).float()
    rel = float((first_output(peer()).float() - eager_ref).norm() / eager_ref.norm())
    row: dict[str, Any] = {"case": name, "op": op, "params": params,
                           "kernel_hash": result.kernel_hash, "rel_error_vs_peer": rel,
                           "back_to_back_input_copies": len(copies)}
    graphs = {}
    for label, call in (("pipetune", ours), ("peer", peer)):
        graphs[label], graph_out = capture(torch, call, args.graph_calls)
        row[label] = {"host_us": host_us(torch, call, args.calls)}
        if label == "pipetune":
            diff = (first_output(graph_out).float() - eager_ref).norm() / eager_ref.norm()
            row["graph_rel_diff_vs_eager"] = float(diff)
    calls = {"pipetune": ours, "peer": peer}
    figures = {
        "eager_us": lambda label: do_bench(calls[label], return_mode="median") * 1e3,
        "back_to_back_us": lambda label: back_to_back_us(torch, cycled[label], args.calls),
        "graph_us": lambda label: replay_us(torch, graphs[label], args.graph_calls),
    }
    for figure, timed in figures.items():
        samples = interleaved(torch, timed, args.rounds, args.cool_down_s)
        for label, values in samples.items():
            row[label][figure] = statistics.median(values)
            row[label][f"{figure}_rounds"] = values
    ours_t, peer_t = row["pipetune"], row["peer"]
    row["host_ratio"] = ours_t["host_us"] / peer_t["host_us"]
    for figure in ("eager", "back_to_back", "graph"):
        row[f"{figure}_ratio"] = peer_t[f"{figure}_us"] / ours_t[f"{figure}_us"]
    return row


def main(argv: list[str] | None = None) -> int:
    today = datetime.date.today().isoformat()
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="tuning budget per case")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--graph-calls", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds per figure")
    parser.add_argument("--cool-down-s", type=float, default=0.5,
                        help="idle GPU time before each timed figure")
    parser.add_argument("--only", nargs="*", default=[], help="case name prefixes")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--out", default=dated_result("launch_overhead"))
    args = parser.parse_args(argv)
    names = [n for n in CASES if not args.only or any(n.startswith(o) for o in args.only)]
    rows = []
    for name in names:
        row = measure(name, args.seconds, args)
        rows.append(row)
        if "error" in row:
            print(f"{name:<42} {row['error']}", flush=True)
            continue
        print(f"{name:<42} host {row['pipetune']['host_us']:7.1f} us vs "
              f"{row['peer']['host_us']:6.1f} us ({row['host_ratio']:.2f}x)  eager "
              f"{row['eager_ratio']:.3f}  b2b {row['back_to_back_ratio']:.3f}  graph "
              f"{row['graph_ratio']:.3f}", flush=True)
    ok = [r for r in rows if "error" not in r]
    summary = {f"{k}_geomean": geomean([r[k] for r in ok]) for k in
               ("host_ratio", "eager_ratio", "back_to_back_ratio", "graph_ratio")} if ok else {}
    write_json(args.out, {"date": today, "suite": "launch_overhead", **tree_state(),
                          "cases": rows, **summary})
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
