"""Decode GEMMs (issue 44): the linear layers of real models at the small m of LLM
inference, pipetune against ``torch.nn.functional.linear`` (bf16) and
``torch._scaled_mm`` (FP8 e4m3, per-tensor scales, bf16 output), in a CUDA graph.

The suite (issue 44; the benchmark plan's "Decode" suite): Llama-3-8B's qkv, o, gate_up and
down; Llama-3-70B's sharded 8 ways; Mixtral's expert matrices; m in 1..256; B stored n x k
as ``nn.Linear`` keeps its weight (``b_layout`` "nk"). A case is (n, k, m, dtype): a weight
shape that two models share is one case, which records every layer it serves.

Per case, in one process on one GPU:

1. **Tune** it in process (``pipetune.tune``, ``--seconds`` of search, one SQLite database
   for the whole bench run) and load the kernel (``pipetune.load``); keep the run's own
   figures: its latency, its peer's, the speedup and, where the run records it, the timing
   method.
2. **Check** pipetune's output on fresh random inputs (never zeros): bf16 against the
   peer's, FP8 against the fp32 product (:data:`REL_ERROR_BOUND`), and its graph replay's
   output against its eager call's. A case that fails has no figures.
3. **Time** pipetune's callable and the peer, each allocating its output as a user's call
   does, cycling over distinct weight copies whose bytes exceed twice the L2 (so each call
   reads its weight from HBM, as a model's layers do; the copy rule is the service's graph
   timing's, :func:`weight_copies`), three ways (``bench/launch_overhead.py``'s method):
   **graph** (the replay of a CUDA graph of ``--graph-calls`` or more calls, divided by the
   calls), **eager** (``triton.testing.do_bench`` on one call) and **back to back** (events
   around calls enqueued behind a GPU sleep). Figures are interleaved pipetune / peer over
   ``--rounds`` rounds, each after ``--cool-down-s`` of idle GPU; each is the median of its
   rounds. Ratios are the peer's time over pipetune's (> 1: pipetune faster).
4. **Bandwidth** of each kernel: (weight + activation + output bytes) / time, in TB/s and
   as a fraction of the 4.3 TB/s copy ceiling (:data:`COPY_CEILING_TBPS`); this process's
   own device-to-device copy is measured beside it.
5. **Agreement**: the run's stored speedup over the graph ratio; off by more than
   :data:`AGREEMENT_TOLERANCE` it is flagged (the stored figure is then not the one a
   decode step sees).

Per model, at each m and dtype whose cases all have a kernel: one decode step's GEMMs
(every matrix of the model in each of ``--layers`` or more layers, distinct weights, more
than twice the L2 in all) captured in one CUDA graph, pipetune against the peer: the GEMM
time per layer and the ratio. ``--steps-from`` runs the steps alone, on the kernels earlier
runs tuned (rebuilt from their results files' stored choices): a suite measured a few
matrices at a time, over several device sessions, gets its steps in one short call.

The results file holds the device fingerprint, the tree, every case (its figures, the
tuned kernel's schedule, the seconds its tune and its check and timing took), the
per-model steps, and per dtype the geometric means and the least graph ratio.

    PYTHONPATH=. python3 bench/decode.py --models llama-3-8b --m 1 16 128 \\
        --dtypes bfloat16 --out bench/results/decode-DATE.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import dated_result, geomean, tree_state, write_json  # noqa: E402
from bench.launch_overhead import (  # noqa: E402
    back_to_back_us,
    capture,
    interleaved,
    replay_us,
)
from scheduler_search.ops import DTYPE_BYTES  # noqa: E402

#: model -> layer -> (n, k) of its weight (n x k, as ``nn.Linear`` stores it). Llama-3-8B:
#: hidden 4096, 32 query heads and 8 KV heads of 128, FFN 14336 (gate and up fused);
#: Llama-3-70B sharded 8 ways (tensor parallel): hidden 8192, 64 + 2 x 8 heads, FFN 28672,
#: each split by 8; Mixtral 8x7B's expert matrices as issue 44 lists them.
MODELS: dict[str, dict[str, tuple[int, int]]] = {
    "llama-3-8b": {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096),
                   "down": (4096, 14336)},
    "llama-3-70b-tp8": {"qkv": (1280, 8192), "o": (8192, 1024), "gate_up": (7168, 8192),
                        "down": (8192, 3584)},
    "mixtral-8x7b": {"w13": (14336, 4096), "w2": (4096, 14336)},
}
M_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DTYPES = ("bfloat16", "float8_e4m3")
#: The output is bf16 for both input types (2 bytes).
OUT_BYTES = 2
#: PyTorch's name of each input dtype.
TORCH_DTYPES = {"bfloat16": "bfloat16", "float8_e4m3": "float8_e4m3fn"}
_SHORT = {"bfloat16": "bf16", "float8_e4m3": "fp8"}
#: H200 device-to-device copy, read + write: about 4.3 TB/s (docs/benchmarks.md, "Ceilings
#: measured on an H200"; 4.28 on 2026-11-29); the bench also measures its own (``copy_tbps``).
COPY_CEILING_TBPS = 4.3
#: Relative L2 error allowed: bf16 against the peer's output (the benchmark plan's); FP8
#: against the fp32 product of the same 8-bit inputs and scales (bf16 rounding of the
#: output is ~2^-9; the looser bound leaves room for a split-k accumulation order).
REL_ERROR_BOUND = {"bfloat16": 1e-2, "float8_e4m3": 2e-2}
#: How far the run's stored speedup may be from the graph ratio before it is flagged.
AGREEMENT_TOLERANCE = 0.05
FIGURES = ("graph", "eager", "back_to_back")


@dataclass(frozen=True)
class Case:
    """One decode GEMM, ``c[m, n] = a[m, k] @ w[n, k]^T``, and the model layers it serves
    (``model/layer``)."""

    n: int
    k: int
    m: int
    dtype: str
    layers: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"gemm-{self.m}x{self.n}x{self.k}-{_SHORT[self.dtype]}-nk"

    @property
    def key(self) -> tuple[int, int, int, str]:
        """What a model step looks its kernel up by."""
        return (self.n, self.k, self.m, self.dtype)

    def params(self) -> dict[str, Any]:
        """The workload, as ``pipetune.tune`` takes it."""
        return {"m": self.m, "n": self.n, "k": self.k, "dtype": self.dtype, "b_layout": "nk"}

    @property
    def weight_bytes(self) -> int:
        return self.n * self.k * DTYPE_BYTES[self.dtype]

    @property
    def traffic_bytes(self) -> int:
        """Bytes a call must move at least: the weight and the activation read, the output
        written (FP8's two 4-byte scales left out)."""
        return traffic_bytes(self.m, self.n, self.k, self.dtype)


def traffic_bytes(m: int, n: int, k: int, dtype: str) -> int:
    """Weight + activation + output bytes of one ``m x n x k`` decode GEMM."""
    return (n * k + m * k) * DTYPE_BYTES[dtype] + m * n * OUT_BYTES


def weight_layers(models: Iterable[str]) -> dict[tuple[int, int], tuple[str, ...]]:
    """Each distinct weight shape (n, k) of ``models``, in order of first appearance, with
    the layers (``model/layer``) that have it."""
    served: dict[tuple[int, int], list[str]] = {}
    for model in models:
        for layer, shape in MODELS[model].items():
            served.setdefault(shape, []).append(f"{model}/{layer}")
    return {shape: tuple(layers) for shape, layers in served.items()}


def decode_cases(models: Sequence[str] = tuple(MODELS), ms: Sequence[int] = M_SIZES,
                 dtypes: Sequence[str] = DTYPES, limit: int | None = None,
                 weights: Sequence[tuple[int, int]] | None = None) -> list[Case]:
    """The suite's cases for the chosen models, m and dtypes, deduplicated by (n, k): per
    dtype, per weight shape, per m (so ``limit`` keeps whole m sweeps of the first shapes).
    ``weights`` keeps only those (n, k) of the models, so a suite cut short by a device
    session can be finished where it stopped."""
    unknown = sorted(set(models) - set(MODELS)) + sorted(set(dtypes) - set(DTYPES))
    served = weight_layers(model for model in models if model in MODELS)
    unknown += [f"{n}x{k}" for n, k in weights or () if (n, k) not in served]
    if unknown:
        raise ValueError(f"unknown models, dtypes or weights {unknown}: models "
                         f"{sorted(MODELS)}, dtypes {list(DTYPES)}, weights of those models "
                         f"{[f'{n}x{k}' for n, k in served]}")
    cases = [Case(n, k, m, dtype, layers) for dtype in dtypes
             for (n, k), layers in served.items()
             if weights is None or (n, k) in weights for m in ms]
    return cases if limit is None else cases[:limit]


def weight_copies(weight_bytes: int, l2_bytes: int) -> int:
    """Distinct weight copies a graph cycles over: bytes together over twice the L2, at
    least two, at most ``workers.graph_timing.MAX_COPIES`` (256): the service's own graph
    timing rule, so that a run's stored figure and this bench's read weights alike
    (``launch_overhead``'s rule stops at 8 copies: a loaded kernel keeps 16 argument
    signatures, which matters to back-to-back calls, not to a captured graph)."""
    from workers.graph_timing import copies_for_cold_l2

    return copies_for_cold_l2(weight_bytes, l2_bytes)


def graph_calls(copies: int, least: int) -> int:
    """Calls one graph captures: at least ``least``, a whole number of cycles over the
    copies (each copy read as often as the others)."""
    return copies * max(1, -(-least // copies))


def step_layers(layer_bytes: int, l2_bytes: int, wanted: int) -> int:
    """Layers a model step's graph holds: ``wanted``, or more until the weights exceed
    twice the L2."""
    return max(wanted, 2 * l2_bytes // layer_bytes + 1)


def bandwidth(moved_bytes: int, us: float,
              ceiling_tbps: float = COPY_CEILING_TBPS) -> dict[str, float]:
    """TB/s of ``moved_bytes`` in ``us`` microseconds, and its fraction of the ceiling."""
    tbps = moved_bytes / us / 1e6
    return {"tbps": tbps, "fraction_of_copy_ceiling": tbps / ceiling_tbps}


def agreement(stored_speedup: float | None, graph_ratio: float | None,
              tolerance: float = AGREEMENT_TOLERANCE) -> dict[str, Any]:
    """The run's stored speedup over the graph ratio this bench measured; ``flagged`` when
    it is more than ``tolerance`` away from 1 (None when either figure is missing)."""
    if not stored_speedup or not graph_ratio:
        return {"agreement": None, "flagged": None}
    value = stored_speedup / graph_ratio
    return {"agreement": value, "flagged": abs(value - 1.0) > tolerance}


def correctness_error(dtype: str, errors: dict[str, float]) -> str | None:
    """Why a case's output does not count (None: it does): bf16 is checked against the
    peer's output, FP8 against the fp32 product; NaN fails."""
    which = "rel_error_vs_peer" if dtype == "bfloat16" else "rel_error_vs_fp32"
    bound = REL_ERROR_BOUND[dtype]
    if errors[which] <= bound:  # False for NaN
        return None
    return f"pipetune's output is off: {which} {errors[which]:.3g} > {bound:g}"


def _pick(key: str, *sources: dict[str, Any] | None) -> Any:
    """The first non-None ``key`` among ``sources``."""
    return next((s[key] for s in sources if s and s.get(key) is not None), None)


def stored_figures(result: Any) -> dict[str, Any]:
    """What the tuning run stored of the case (TuneResult: the cached schedule's figures,
    else the run's); ``timing_method`` where the run or schedule records it."""
    run, schedule = result.run or {}, result.schedule or {}
    return {
        "status": result.status, "run_id": result.run_id, "kernel_hash": result.kernel_hash,
        "trials": run.get("trials_done"), "latency_us": result.latency_us,
        "baseline": _pick("baseline", schedule, run),
        "baseline_latency_us": _pick("baseline_latency_us", schedule, run),
        "speedup_vs_baseline": result.speedup_vs_baseline,
        "timing_method": (getattr(result, "timing_method", None)
                          or _pick("timing_method", schedule, run)),
    }


def schedule_of(result: Any) -> dict[str, Any]:
    """The tuned kernel's schedule: its hash and choices (the cached schedule's, else the
    kernel artifact's)."""
    schedule, kernel = result.schedule or {}, result.kernel or {}
    return {"schedule_hash": _pick("schedule_hash", schedule, kernel),
            "choices": schedule.get("choices") or (kernel.get("extra") or {}).get("choices")}


def summarise(rows: list[dict[str, Any]], steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Per dtype: the geometric mean of each ratio over the cases with figures, the least
    graph ratio and its case, how many agreements are flagged; the model steps' geometric
    mean and least ratio; the failures."""
    summary: dict[str, Any] = {}
    for dtype in DTYPES:
        ok = [r for r in rows if r["params"]["dtype"] == dtype and "error" not in r]
        mine = [s for s in steps if s["dtype"] == dtype and "error" not in s]
        if not ok and not mine:
            continue
        entry: dict[str, Any] = {"cases": len(ok)}
        if ok:
            entry |= {f"{f}_ratio_geomean": geomean([r[f"{f}_ratio"] for r in ok])
                      for f in FIGURES}
            least = min(ok, key=lambda r: r["graph_ratio"])
            entry["graph_ratio_min"] = {"case": least["case"], "ratio": least["graph_ratio"]}
            entry["agreement_flagged"] = sorted(r["case"] for r in ok
                                                if r["agreement"]["flagged"])
        if mine:
            entry["step_ratio_geomean"] = geomean([s["ratio"] for s in mine])
            least_step = min(mine, key=lambda s: s["ratio"])
            entry["step_ratio_min"] = {"model": least_step["model"], "m": least_step["m"],
                                       "ratio": least_step["ratio"]}
        summary[dtype] = entry
    summary["errors"] = sorted(r["case"] for r in rows if "error" in r)
    summary["step_errors"] = [f"{s['model']} m={s['m']} {s['dtype']}" for s in steps
                              if "error" in s]
    return summary


# ----- on the GPU --------------------------------------------------------------------------------
class _Cycle:
    """Calls its callables in turn (one per weight copy); ``last`` is the copy the latest
    call read, so a graph's last output can be compared with an eager call's."""

    def __init__(self, calls: Sequence[Callable[[], Any]]) -> None:
        self.calls, self.next, self.last = calls, 0, -1

    def __call__(self) -> Any:
        self.last, self.next = self.next, (self.next + 1) % len(self.calls)
        return self.calls[self.last]()


def random_operand(torch: Any, shape: tuple[int, ...], dtype: str) -> Any:
    """A fresh N(0, 0.5^2) tensor in the input dtype (as the GEMM spec draws its operands)."""
    values = torch.randn(*shape, device="cuda", dtype=torch.float32) * 0.5
    return values.to(getattr(torch, TORCH_DTYPES[dtype]))


def random_scales(torch: Any, dtype: str) -> tuple[Any, Any] | None:
    """FP8's per-tensor scales, each a (1,) fp32 tensor in [0.5, 2) (the spec's law)."""
    if dtype == "bfloat16":
        return None
    return tuple(torch.empty(1, device="cuda").uniform_(0.5, 2.0) for _ in range(2))


def gemm_calls(torch: Any, kernel: Any, a: Any, w: Any,
               scales: tuple[Any, Any] | None) -> dict[str, Callable[[], Any]]:
    """pipetune's call and the peer's on ``a`` and the weight ``w`` (n x k)."""
    if scales is None:
        from torch.nn.functional import linear

        return {"pipetune": lambda: kernel(a, w), "peer": lambda: linear(a, w)}
    scale_a, scale_b = scales
    return {"pipetune": lambda: kernel(a, w, scale_a, scale_b),
            "peer": lambda: torch._scaled_mm(a, w.t(), scale_a=scale_a, scale_b=scale_b,
                                             out_dtype=torch.bfloat16)}


def _rel(x: Any, ref: Any) -> float:
    return float((x.float() - ref).norm() / ref.norm())


def check(torch: Any, calls: dict[str, Callable[[], Any]], a: Any, w: Any,
          scales: tuple[Any, Any] | None) -> dict[str, float]:
    """Relative L2 errors of pipetune's output against the peer's and the fp32 product,
    and of the peer's against the fp32 product."""
    exact = a.float() @ w.float().t()
    if scales is not None:
        exact = exact * (scales[0] * scales[1])
    ours, peer = calls["pipetune"](), calls["peer"]()
    return {"rel_error_vs_peer": _rel(ours, peer.float()), "rel_error_vs_fp32": _rel(ours, exact),
            "peer_rel_error_vs_fp32": _rel(peer, exact)}


def time_case(torch: Any, case: Case, kernel: Any, args: argparse.Namespace,
              l2_bytes: int) -> dict[str, Any]:
    """Check, then the three figures of pipetune's kernel and the peer over weight copies
    beyond twice the L2: medians, ratios, bandwidths."""
    from triton.testing import do_bench

    copies = weight_copies(case.weight_bytes, l2_bytes)
    a, scales = random_operand(torch, (case.m, case.k), case.dtype), random_scales(torch,
                                                                                   case.dtype)
    weights = [random_operand(torch, (case.n, case.k), case.dtype) for _ in range(copies)]
    per_copy = [gemm_calls(torch, kernel, a, w, scales) for w in weights]
    row: dict[str, Any] = {"weight_copies": copies,
                           "check": check(torch, per_copy[0], a, weights[0], scales)}
    failed = correctness_error(case.dtype, row["check"])
    if failed:
        return row | {"error": failed}
    cycles = {label: _Cycle([c[label] for c in per_copy]) for label in ("pipetune", "peer")}
    for cycle in cycles.values():  # every copy's first call (a new signature) outside a capture
        for call in cycle.calls:
            call()
    n_graph = graph_calls(copies, args.graph_calls)
    graphs = {}
    for label, cycle in cycles.items():
        graphs[label], out = capture(torch, cycle, n_graph)
        if label == "pipetune":
            eager = cycle.calls[cycle.last]().float()
            row["graph_rel_diff_vs_eager"] = _rel(out, eager)
    row["graph_calls"] = n_graph
    if not row["graph_rel_diff_vs_eager"] <= REL_ERROR_BOUND[case.dtype]:  # NaN fails too
        return row | {"error": "pipetune's graph replay computes another output than its "
                      f"eager call: {row['graph_rel_diff_vs_eager']:.3g}"}
    timed = {
        "graph": lambda label: replay_us(torch, graphs[label], n_graph),
        "eager": lambda label: do_bench(cycles[label].calls[0], return_mode="median") * 1e3,
        "back_to_back": lambda label: back_to_back_us(torch, cycles[label].calls, args.calls),
    }
    figures: dict[str, dict[str, Any]] = {"pipetune": {}, "peer": {}}
    for figure, measure in timed.items():
        samples = interleaved(torch, measure, args.rounds, args.cool_down_s)
        for label, values in samples.items():
            us = statistics.median(values)
            figures[label] |= {f"{figure}_us": us, f"{figure}_us_rounds": values,
                               f"{figure}_bandwidth": bandwidth(case.traffic_bytes, us)}
    graphs.clear()
    row |= figures
    for figure in FIGURES:
        row[f"{figure}_ratio"] = figures["peer"][f"{figure}_us"] / figures["pipetune"][
            f"{figure}_us"]
    return row


def tune_case(case: Case, seconds: float, database_url: str) -> tuple[dict[str, Any], Any]:
    """Tune ``case`` in this process and load its kernel: (its row so far, the kernel or
    None)."""
    import pipetune

    row: dict[str, Any] = {"case": case.name, "params": case.params(),
                           "layers": list(case.layers), "traffic_bytes": case.traffic_bytes}
    try:
        result = pipetune.tune("gemm", device="auto", budget={"seconds": seconds},
                               database_url=database_url, progress=False, **case.params())
    except Exception as exc:  # one case's failure is that case's row
        return row | {"error": f"tune failed: {exc!r}"}, None
    row |= {"stored": stored_figures(result), "schedule": schedule_of(result)}
    if result.kernel is None:
        return row | {"error": f"no kernel: {result.status}"}, None
    return row, pipetune.load(result.kernel)


def measure_case(torch: Any, case: Case, args: argparse.Namespace, database_url: str,
                 l2_bytes: int) -> tuple[dict[str, Any], Any]:
    """A case's row (tuned, checked, timed; ``error`` when any step failed) and its kernel
    (None when it has no figures)."""
    start = time.perf_counter()
    row, kernel = tune_case(case, args.seconds, database_url)
    row["wall_s"] = {"tune": time.perf_counter() - start}
    if kernel is None:
        return row, None
    try:
        row |= time_case(torch, case, kernel, args, l2_bytes)
    except Exception as exc:  # e.g. the peer refusing the shape
        row["error"] = f"check or timing failed: {exc!r}"
    finally:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        # where a case's wall time goes: the suite's run must fit in device sessions
        row["wall_s"]["check_and_time"] = time.perf_counter() - start - row["wall_s"]["tune"]
    if "error" in row:
        return row, None
    row["agreement"] = agreement(row["stored"]["speedup_vs_baseline"], row["graph_ratio"])
    return row, kernel


def measure_step(torch: Any, model: str, m: int, dtype: str, kernels: dict[tuple, Any],
                 args: argparse.Namespace, l2_bytes: int) -> dict[str, Any]:
    """One decode step's GEMMs of ``model`` (every matrix in each of the layers, distinct
    weights) in one CUDA graph, pipetune against the peer: time per layer and ratio."""
    matrices = MODELS[model]
    row: dict[str, Any] = {"model": model, "m": m, "dtype": dtype}
    missing = [layer for layer, (n, k) in matrices.items() if (n, k, m, dtype) not in kernels]
    if missing:
        return row | {"error": f"no checked kernel for {missing}"}
    layer_bytes = sum(n * k for n, k in matrices.values()) * DTYPE_BYTES[dtype]
    layers = step_layers(layer_bytes, l2_bytes, args.layers)
    scales = random_scales(torch, dtype)
    acts = {k: random_operand(torch, (m, k), dtype) for _, k in matrices.values()}
    calls = [gemm_calls(torch, kernels[(n, k, m, dtype)], acts[k],
                        random_operand(torch, (n, k), dtype), scales)
             for _ in range(layers) for n, k in matrices.values()]

    def step(label: str) -> Callable[[], Any]:
        def replay_step() -> Any:
            for call in calls:
                out = call[label]()
            return out
        return replay_step

    graphs, outs = {}, {}
    for label in ("pipetune", "peer"):
        graphs[label], outs[label] = capture(torch, step(label), 1)
    samples = interleaved(torch, lambda label: replay_us(torch, graphs[label], layers),
                          args.rounds, args.cool_down_s)
    us = {label: statistics.median(values) for label, values in samples.items()}
    moved = sum(traffic_bytes(m, n, k, dtype) for n, k in matrices.values())
    row |= {"layers": layers, "layer_weight_bytes": layer_bytes,
            "rel_error_vs_peer": _rel(outs["pipetune"], outs["peer"].float()),
            "pipetune": {"layer_us": us["pipetune"], "layer_us_rounds": samples["pipetune"],
                         "bandwidth": bandwidth(moved, us["pipetune"])},
            "peer": {"layer_us": us["peer"], "layer_us_rounds": samples["peer"],
                     "bandwidth": bandwidth(moved, us["peer"])},
            "ratio": us["peer"] / us["pipetune"]}
    graphs.clear()
    calls.clear()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return row


def copy_tbps(torch: Any, size_bytes: int = 1 << 30) -> float:
    """This process's device-to-device copy (read + write bytes over time, median of 10):
    the ceiling beside :data:`COPY_CEILING_TBPS`."""
    src = torch.full((size_bytes,), 7, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(10):
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * size_bytes / statistics.median(times) / 1e6


def fingerprint(torch: Any) -> dict[str, Any]:
    """The device as the service fingerprints it (else as PyTorch describes it), with the
    library versions the figures depend on."""
    import triton

    try:
        from workers import read_fingerprint

        found = read_fingerprint(0, "")
    except Exception:  # CuPy missing: PyTorch's view of the device
        props = torch.cuda.get_device_properties(0)
        found = {"name": props.name, "compute_capability": f"{props.major}.{props.minor}",
                 "sm_count": props.multi_processor_count, "l2_bytes": props.L2_cache_size}
    return found | {"torch_version": torch.__version__, "triton_version": triton.__version__}


def print_header() -> None:
    print(f"{'case':<32} {'ours us':>8} {'peer us':>8} {'graph':>6} {'eager':>6} {'b2b':>6} "
          f"{'TB/s':>5} {'ceil':>5} {'stored':>6} {'agree':>6}  layers", flush=True)


def print_case(r: dict[str, Any]) -> None:
    """A case's line: graph figures, the other ratios, bandwidth, agreement (! flagged)."""
    if "error" in r:
        print(f"{r['case']:<32} {r['error']}", flush=True)
        return
    ours, peer, agree = r["pipetune"], r["peer"], r["agreement"]
    mark = " !" if agree["flagged"] else ""
    print(f"{r['case']:<32} {ours['graph_us']:8.2f} {peer['graph_us']:8.2f} "
          f"{r['graph_ratio']:6.3f} {r['eager_ratio']:6.3f} {r['back_to_back_ratio']:6.3f} "
          f"{ours['graph_bandwidth']['tbps']:5.2f} "
          f"{ours['graph_bandwidth']['fraction_of_copy_ceiling']:5.2f} "
          f"{_fmt(r['stored']['speedup_vs_baseline']):>6} {_fmt(agree['agreement']):>6}{mark}"
          f"  {','.join(r['layers'])}", flush=True)


def print_step(s: dict[str, Any]) -> None:
    """A model step's line: GEMM time per layer, pipetune and peer, and the ratio."""
    label = f"step {s['model']} m={s['m']} {_SHORT[s['dtype']]}"
    if "error" in s:
        print(f"{label:<32} {s['error']}", flush=True)
        return
    print(f"{label:<32} {s['pipetune']['layer_us']:8.2f} {s['peer']['layer_us']:8.2f} "
          f"{s['ratio']:6.3f}  (per layer; {s['layers']} layers in the graph)", flush=True)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def model_steps(models: Sequence[str], ms: Sequence[int], dtypes: Sequence[str],
                keys: Collection[tuple[int, int, int, str]]) -> list[tuple[str, int, str]]:
    """The (model, m, dtype) steps whose every matrix has a kernel among ``keys`` (a
    case's :attr:`Case.key`; ``--limit`` may leave a model's step out)."""
    return [(model, m, dtype) for dtype in dtypes for model in models for m in ms
            if all((n, k, m, dtype) in keys for n, k in MODELS[model].values())]


def stored_schedules(paths: Sequence[Path]) -> dict[tuple[int, int, int, str], dict[str, Any]]:
    """The tuned schedule of every case with figures in ``paths`` (this bench's results
    files), by the key a model step looks its kernel up by; a later file's case replaces an
    earlier one's."""
    found: dict[tuple[int, int, int, str], dict[str, Any]] = {}
    for path in paths:
        for case in json.loads(Path(path).read_text())["cases"]:
            choices = (case.get("schedule") or {}).get("choices")
            if choices and "error" not in case:
                p = case["params"]
                found[(p["n"], p["k"], p["m"], p["dtype"])] = {
                    "case": case["case"], "params": p, "choices": choices}
    return found


def stored_kernels(stored: dict[tuple, dict[str, Any]], keys: Iterable[tuple]) -> dict:
    """The kernels of ``keys``, rebuilt from their stored choices by this tree (as
    ``bench/decode_profile.py`` rebuilds them) and loaded."""
    import pipetune
    from bench.kernel_profile import rebuilt_artifact

    return {key: pipetune.load(rebuilt_artifact("gemm", stored[key]["params"],
                                                stored[key]["choices"], "h200"))
            for key in keys}


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Every case, then every model step, in this process; the results document (also
    written to ``--out`` after every case, so a run cut short keeps what it measured)."""
    import torch

    torch.manual_seed(args.seed)
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    device = {"device": fingerprint(torch), "copy_tbps_measured": copy_tbps(torch),
              "copy_ceiling_tbps": COPY_CEILING_TBPS, "l2_bytes": l2_bytes}
    url = f"sqlite:///{workdir / 'decode.db'}"
    cases = decode_cases(args.models, args.m, args.dtypes, args.limit, args.weights)
    rows, kernels = [], {}

    def document(steps: list[dict[str, Any]]) -> dict[str, Any]:
        return {"date": datetime.date.today().isoformat(), "suite": "decode", **tree_state(),
                **device, "settings": {k: str(v) if isinstance(v, Path) else v
                                       for k, v in vars(args).items() if k != "out"},
                "cases": rows, "steps": steps, "summary": summarise(rows, steps)}

    if args.steps_from:  # the kernels of earlier runs: no tuning, no case figures
        stored = stored_schedules(args.steps_from)
        cases = []
        wanted = model_steps(args.models, args.m, args.dtypes, stored)
        kernels = stored_kernels(stored, {(n, k, m, dtype) for model, m, dtype in wanted
                                          for n, k in MODELS[model].values()})
    print_header()
    for case in cases:
        row, kernel = measure_case(torch, case, args, url, l2_bytes)
        rows.append(row)
        if kernel is not None:
            kernels[case.key] = kernel
        print_case(row)
        write_json(args.out, document([]))
    # A step of the cases is attempted (and reported) even where one of its kernels failed.
    planned = set(kernels) if args.steps_from else {case.key for case in cases}
    steps = []
    for model, m, dtype in (model_steps(args.models, args.m, args.dtypes, planned)
                            if args.layers > 0 else []):
        try:
            steps.append(measure_step(torch, model, m, dtype, kernels, args, l2_bytes))
        except Exception as exc:  # the cases' figures are kept whatever a step does
            steps.append({"model": model, "m": m, "dtype": dtype,
                          "error": f"step failed: {exc!r}"})
            torch.cuda.empty_cache()
        print_step(steps[-1])
        write_json(args.out, document(steps))
    return document(steps)


def weight_shape(text: str) -> tuple[int, int]:
    """``"8192x1024"`` as (n, k): a weight as ``--weights`` names it."""
    try:
        n, k = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a weight is NxK, e.g. 8192x1024, not {text!r}") from None
    return n, k


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS))
    parser.add_argument("--m", nargs="+", type=int, default=list(M_SIZES))
    parser.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES))
    parser.add_argument("--seconds", type=float, default=6.0, help="tuning budget per case")
    parser.add_argument("--limit", type=int, default=None, help="the first N cases only")
    parser.add_argument("--weights", nargs="+", type=weight_shape, default=None,
                        metavar="NxK", help="only these weights of the models (n x k)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per figure")
    parser.add_argument("--cool-down-s", type=float, default=0.2,
                        help="idle GPU time before each timed figure")
    parser.add_argument("--graph-calls", type=int, default=100,
                        help="least calls a case's graph captures")
    parser.add_argument("--calls", type=int, default=200, help="back-to-back calls")
    parser.add_argument("--layers", type=int, default=4,
                        help="least layers in a model step's graph (0: no model steps)")
    parser.add_argument("--seed", type=int, default=44)
    parser.add_argument("--steps-from", nargs="+", type=Path, default=None, metavar="RESULTS",
                        help="only the model steps, on the kernels these results files "
                             "tuned (rebuilt from their stored choices)")
    parser.add_argument("--keep-db", type=Path, default=None,
                        help="keep the runs' SQLite database in this folder")
    parser.add_argument("--out", default=dated_result("decode"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        workdir = args.keep_db or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        doc = run(args, workdir)
    write_json(args.out, doc)
    print({dtype: {k: v for k, v in entry.items() if k.endswith("geomean") or k.endswith("min")}
           for dtype, entry in doc["summary"].items() if dtype in DTYPES})
    return 0 if not doc["summary"]["errors"] and not doc["summary"]["step_errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
