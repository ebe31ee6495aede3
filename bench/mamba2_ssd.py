"""Mamba2's SSD forward as a model calls it: ``pipetune.torch.mamba_chunk_scan_combined``
against ``mamba_ssm``'s ``mamba_chunk_scan_combined`` (Triton), forward only, on one GPU
(docs/mamba2.md).

Per case, in one process:

1. **Tune** the two kernels the drop-in runs (``mamba2_chunk_state`` with the state
   passing, ``mamba2_chunk_scan`` with the case's D and gate) with ``pipetune.tune`` from an
   empty cache (a database of the run's own), ``--seconds`` each; the wall time is kept.
2. **Check**: the drop-in's ``out`` and ``final_states`` against the peer's on the same
   fresh random inputs (model-like: ``dt`` before softplus around -2, ``A`` negative per
   head); their relative L2 error.
3. **Time** both calls under ``torch.no_grad`` (``bench/launch_overhead.py``'s method: each
   figure after a cool-down, alternating who goes first, median of ``--rounds``):
   **eager** (``do_bench``), **back to back** (calls cycling input copies beyond 3x L2) and
   **graph** (replay of a captured CUDA graph of calls). Ratios are the peer's time over
   pipetune's (> 1: pipetune faster).
4. **Bytes**: what the forward must move at least (inputs read once, ``out`` and
   ``final_states`` written once) and a device-to-device copy of as many bytes, timed the
   same way: the copy ceiling each call is measured against.

Each case runs once per form of the chunk scan ``--scans`` names, each from its own
empty cache: ``searched`` (the default: both forms tuned into one cache, and the drop-in
serves the one whose measured forward is faster, as a user's tune-on-miss does; the row
names it), ``cb`` (the scan reads ``C Bᵀ`` that PyTorch computes first) and ``in_tile``
(the scan computes it in its tile from ``B``: ``cb_in_tile``), so the rows can show what
the fusion is worth.
A call the kernels do not serve runs the peer inside the drop-in; its row says
``served_by: mamba_ssm`` and stays out of the geometric means. ``--only NAME ...`` runs
some cases; ``list`` names them.

    PYTHONPATH=.:.peers python3 bench/mamba2_ssd.py run --out bench/results/mamba2-ssd-DATE.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import dated_result, geomean, tree_state, write_json  # noqa: E402

FIGURES = ("eager", "back_to_back", "graph")
#: The chunk scan's forms: reading ``C Bᵀ`` computed before it, computing it in its tile,
#: or both tuned and the drop-in choosing.
SCANS = ("cb", "in_tile", "searched")
#: GPU time one back-to-back or graph figure aims at (microseconds).
FIGURE_BUDGET_US = 50_000.0


@dataclass(frozen=True)
class Case:
    """One call of ``mamba_chunk_scan_combined``: its shape and the optional arguments."""

    name: str
    batch: int
    seqlen: int
    nheads: int = 80
    headdim: int = 64
    dstate: int = 128
    ngroups: int = 1
    chunk_size: int = 256
    dtype: str = "float16"
    options: dict[str, bool] = field(default_factory=dict)

    def option(self, name: str) -> bool:
        return bool(self.options.get(name))


#: The Mamba2 suite's shapes (docs/benchmarks.md), then ngroups 8, bf16, headdim 128 with
#: Mamba2's layer options (z, D per channel, dt_bias with softplus, initial states), and
#: packed sequences (seq_idx).
CASES = (
    Case("suite-1x1024", 1, 1024),
    Case("suite-1x16384", 1, 16384),
    Case("suite-8x4096", 8, 4096),
    Case("suite-64x4096", 64, 4096),
    Case("g8-8x4096", 8, 4096, ngroups=8),
    Case("bf16-8x4096", 8, 4096, dtype="bfloat16"),
    Case("layer-p128-4x4096", 4, 4096, nheads=64, headdim=128, ngroups=8, dtype="bfloat16",
         options={"z": True, "d_per_channel": True, "dt_bias": True, "initial_states": True}),
    Case("layer-p64-g1-8x2048", 8, 2048, chunk_size=128, dtype="bfloat16",
         options={"z": True, "dt_bias": True}),
    Case("seq-idx-8x4096", 8, 4096, dtype="bfloat16", options={"seq_idx": True}),
)


def call_inputs(torch: Any, case: Case, seed: int) -> dict[str, Any]:
    """Fresh random arguments of one call, as a Mamba2 layer makes them."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    dt = getattr(torch, case.dtype)
    b, s, h, p, n, groups = (case.batch, case.seqlen, case.nheads, case.headdim, case.dstate,
                             case.ngroups)

    def randn(*shape: int, scale: float = 1.0, dtype: Any = dt) -> Any:
        return (torch.randn(shape, generator=g, device="cuda") * scale).to(dtype)

    args: dict[str, Any] = {
        "x": randn(b, s, h, p), "dt": randn(b, s, h, scale=0.5) - 2.0,
        "A": -torch.rand(h, generator=g, device="cuda") * 8 - 1,
        "B": randn(b, s, groups, n, scale=0.5), "C": randn(b, s, groups, n, scale=0.5),
        "D": randn(*((h, p) if case.option("d_per_channel") else (h,)), dtype=torch.float32),
    }
    if case.option("z"):
        args["z"] = randn(b, s, h, p)
    if case.option("dt_bias"):
        args["dt_bias"] = randn(h, scale=0.5, dtype=torch.float32)
        args["dt_softplus"] = True
    if case.option("initial_states"):
        args["initial_states"] = randn(b, h, p, n, scale=0.5, dtype=torch.float32)
    if case.option("seq_idx"):  # four sequences a row, cut at random positions
        cuts = torch.sort(torch.randint(1, s, (b, 3), generator=g, device="cuda")).values
        positions = torch.arange(s, device="cuda")[None, :, None]
        args["seq_idx"] = (positions >= cuts[:, None, :]).sum(-1).to(torch.int32)
    return args


def min_bytes(args: dict[str, Any], case: Case) -> int:
    """What the forward moves at least: each tensor argument read once, ``out`` (as x)
    and the fp32 ``final_states`` written once."""
    read = sum(t.numel() * t.element_size() for t in args.values() if hasattr(t, "numel"))
    final = case.batch * case.nheads * case.headdim * case.dstate * 4
    return read + args["x"].numel() * args["x"].element_size() + final


def tune_kernels(case: Case, args: dict[str, Any], seconds: float, url: str,
                 scan: str = "cb") -> dict[str, Any]:
    """The drop-in's kernels tuned from an empty cache (the chunk scan in form ``scan``;
    ``searched``: in both): per workload, the run's status, trials and wall seconds."""
    import pipetune
    from pipetune import _mamba2 as ssd

    found = ssd.workloads(args["x"], args["B"], case.chunk_size, args["D"],
                          args.get("initial_states"), case.option("z"), False,
                          packed=case.option("seq_idx"))
    runs: dict[str, Any] = {}
    if found is None:
        return runs
    kernels = {role: (kernel.op, kernel.params()) for role, kernel in found.kernels().items()}
    roles = ["state", *(["scan"] if scan in ("cb", "searched") else []),
             *(["scan_in_tile"] if scan in ("in_tile", "searched") else [])]
    for op, params in (kernels[role] for role in roles):
        started = time.perf_counter()
        result = pipetune.tune(op, device="auto", budget={"seconds": seconds},
                               database_url=url, progress=False, **params)
        name = op + ("+cb_in_tile" if params.get("cb_in_tile") else "")
        runs[name] = {"op": op, "status": result.status,
                      "wall_s": time.perf_counter() - started, "params": params,
                      "schedule": (result.kernel or {}).get("schedule_hash"),
                      "latency_us": (result.schedule or {}).get("latency_us"),
                      "trials": (result.run or {}).get("trials_done")}
    return runs


def served_by_kernels(drop_ins: Any, runs: dict[str, Any], like: Any) -> bool:
    """Whether the drop-in's cache holds every tuned kernel (it then runs them, not the
    peer)."""
    return len(runs) >= 2 and all(drop_ins.kernel(run["op"], run["params"], like) is not None
                                  for run in runs.values())


def scan_served(drop_ins: Any, runs: dict[str, Any], like: Any) -> str | None:
    """The form of the chunk scan the drop-in runs: ``in_tile`` or ``cb`` (None: none)."""
    from pipetune import _mamba2 as ssd

    state = runs.get("mamba2_chunk_state")
    scan = runs.get("mamba2_chunk_scan") or runs.get("mamba2_chunk_scan+cb_in_tile")
    if state is None or scan is None:
        return None
    plain = {k: v for k, v in scan["params"].items() if k != "cb_in_tile"}
    kernel = drop_ins.mamba2_kernels((state["params"], plain), like)[1]
    return None if kernel is None else "in_tile" if ssd.computes_cb(kernel) else "cb"


def rel_error(torch: Any, ours: Any, ref: Any) -> float:
    ours, ref = ours.float(), ref.float()
    return float((ours - ref).norm() / ref.norm())


def figures(torch: Any, calls: dict[str, Any], cycled: dict[str, list[Any]],
            args: argparse.Namespace) -> dict[str, Any]:
    """The three figures' medians (microseconds) and ratios (peer / pipetune)."""
    from triton.testing import do_bench

    from bench.launch_overhead import three_figures

    eager = max(do_bench(call, return_mode="median") * 1e3 for call in calls.values())
    n_calls = max(3, min(args.calls, int(FIGURE_BUDGET_US / eager)))
    return three_figures(torch, calls, cycled, (n_calls, n_calls), args.rounds,
                         args.cool_down_s, "mamba_ssm")


def copy_ceiling_us(torch: Any, nbytes: int) -> float:
    """Median GPU time of a device-to-device copy moving ``nbytes`` (half read, half
    written), back to back."""
    from bench.launch_overhead import back_to_back_us

    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return statistics.median(back_to_back_us(torch, [lambda: dst.copy_(src)], 20)
                             for _ in range(5))


def run_case(case: Case, args: argparse.Namespace, workdir: Path, scan: str) -> dict[str, Any]:
    import torch
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined as peer_op

    import pipetune.torch as pt

    inputs = call_inputs(torch, case, args.seed)
    url = f"sqlite:///{workdir / f'{case.name}-{scan}.db'}"
    runs = tune_kernels(case, inputs, args.seconds, url, scan)
    drop_ins = pt.DropIns(database_url=url)
    from bench.launch_overhead import copies_for_cold_l2

    copies = [inputs] + [call_inputs(torch, case, args.seed + 1 + i) for i in range(
        copies_for_cold_l2(torch, tuple(t for t in inputs.values() if hasattr(t, "numel"))) - 1)]

    def ours(a: dict[str, Any]) -> Any:
        return drop_ins.mamba_chunk_scan_combined(**_positional(a, case), **_keywords(a))

    def peer(a: dict[str, Any]) -> Any:
        return peer_op(**_positional(a, case), **_keywords(a))

    with torch.no_grad():
        (out, final), (want, want_final) = ours(inputs), peer(inputs)
        served = "pipetune" if served_by_kernels(drop_ins, runs, inputs["x"]) else "mamba_ssm"
        row = {"case": case.name, "scan": scan, "served_by": served, "tuning": runs,
               "scan_served": scan_served(drop_ins, runs, inputs["x"]),
               "rel_error_out": rel_error(torch, out, want),
               "rel_error_final_states": rel_error(torch, final, want_final),
               **figures(torch, {"pipetune": lambda: ours(inputs), "peer": lambda: peer(inputs)},
                         {"pipetune": [lambda a=a: ours(a) for a in copies],
                          "peer": [lambda a=a: peer(a) for a in copies]}, args)}
    nbytes = min_bytes(inputs, case)
    ceiling = copy_ceiling_us(torch, nbytes)
    row |= {"min_bytes": nbytes, "copy_ceiling_us": ceiling,
            "pipetune_over_copy": row["back_to_back_us"]["pipetune"] / ceiling,
            "mamba_ssm_over_copy": row["back_to_back_us"]["mamba_ssm"] / ceiling}
    return row


def _positional(a: dict[str, Any], case: Case) -> dict[str, Any]:
    return {n: a[n] for n in ("x", "dt", "A", "B", "C")} | {"chunk_size": case.chunk_size}


def _keywords(a: dict[str, Any]) -> dict[str, Any]:
    named = ("D", "z", "dt_bias", "initial_states", "seq_idx", "dt_softplus")
    return {n: a[n] for n in named if n in a} | {"return_final_states": True}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("list", "run"))
    parser.add_argument("--only", nargs="*", default=None, help="case names (list shows them)")
    parser.add_argument("--seconds", type=float, default=30.0, help="tuning budget per kernel")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--cool-down-s", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--scans", nargs="+", choices=SCANS, default=["searched"],
                        help="forms of the chunk scan: reading cb, computing it in the tile, "
                             "or both tuned and the drop-in choosing (what users get)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" /
                                             dated_result("mamba2-ssd")))
    args = parser.parse_args(argv)
    cases = [c for c in CASES if args.only is None or c.name in args.only]
    if args.command == "list":
        for case in cases:
            print(case.name, case)
        return 0
    import torch

    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for case, scan in ((c, s) for c in cases for s in args.scans):
            row = run_case(case, args, Path(workdir), scan)
            rows.append(row)
            print(f"{case.name:<22} {scan:<8} {row['served_by']:<9} "
                  f"err {row['rel_error_out']:.1e}  "
                  + "  ".join(f"{f} {row[f'{f}_ratio']:.3f}" for f in FIGURES)
                  + f"  x copy {row['pipetune_over_copy']:.2f}", flush=True)
    summary = {}
    for scan in args.scans:
        served = [r for r in rows if r["served_by"] == "pipetune" and r["scan"] == scan]
        if served:
            summary[scan] = {f"{f}_geomean": geomean([r[f"{f}_ratio"] for r in served])
                             for f in FIGURES}
            summary[scan] |= {f"{f}_min": min(r[f"{f}_ratio"] for r in served)
                              for f in FIGURES}
    write_json(args.out, {"suite": "mamba2_ssd", "device": torch.cuda.get_device_name(),
                          "tree": tree_state(), "args": vars(args), "summary": summary,
                          "cases": rows})
    print("summary", summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
