"""Attention in a training step (docs/attention_backward.md): the forward plus the backward
of one attention layer through pipetune's differentiable op against SDPA with cuDNN forced.

A training step calls attention's forward, keeps what the backward needs, and later calls
the backward with the loss's gradient. Here a step is ``o = attention(q, k, v)`` then
``torch.autograd.grad(o, (q, k, v), do)``: pipetune's side is
``pipetune.torch.DropIns.attention`` (the ``pipetune::`` custom op whose autograd formula
runs the tuned backward kernel), SDPA's is ``scaled_dot_product_attention`` under
``sdpa_kernel(CUDNN_ATTENTION)`` (GQA by ``enable_gqa``, or k and v repeated per query head
where cuDNN refuses it). Tensors are (batch, heads, seq, head_dim), as PyTorch holds them.

The kernels are the suite runs' winners, so this measures what the drop-in serves and not
a search: ``--forward-results`` (``bench/attention.py``, bhsd) and ``--backward-results``
(``bench/attention_backward.py --layouts bhsd``) hold each case's schedule choices; every
case found in both is rendered here, checked (o, dq, dk, dv against SDPA's math backend in
fp32 on fresh random inputs) and timed eager, back to back and as a graph replay,
pipetune and cuDNN interleaved in this one process. Writes ``--out`` and prints the table
with geometric means.

    PYTHONPATH=. python3 bench/attention_training.py \\
        --forward-results bench/results/attention-suite-bhsd-2026-12-05.json \\
        --backward-results bench/results/attention-backward-bhsd-2026-12-06.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import dated_result, geomean, tree_state, write_json  # noqa: E402

FIGURES = ("eager", "back_to_back", "graph")
#: Relative L2 error bound of o, dq, dk and dv against the fp32 reference.
ERROR_BOUND = 2e-2


def _key(params: dict[str, Any]) -> tuple:
    """A case's identity across the two results files (the backward's own fields aside)."""
    return tuple(sorted((k, v) for k, v in params.items() if k != "deterministic"))


def paired_cases(forward_doc: dict[str, Any],
                 backward_doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The cases both runs measured, in bhsd: params and each op's schedule choices."""
    forward = {_key(c["params"]): c for c in forward_doc["cases"] if "choices" in c}
    cases = []
    for c in backward_doc["cases"]:
        match = forward.get(_key(c["params"]))
        if match is None or "choices" not in c or c["params"].get("layout") != "bhsd":
            continue
        params = {k: v for k, v in c["params"].items() if k != "deterministic"}
        cases.append({"params": params, "forward": match["choices"], "backward": c["choices"],
                      "backward_deterministic": bool(c["params"].get("deterministic"))})
    return cases


def artifacts(case: dict[str, Any], device_name: str) -> dict[str, dict[str, Any]]:
    """Each op's kernel rendered from its choices by this tree's code generation."""
    from codegen import render
    from scheduler_search.hardware import get_device
    from scheduler_search.ops import parse_spec
    from scheduler_search.sprogram import plan_sprogram

    device = get_device(device_name)
    params = case["params"]
    rendered = {}
    for op, extra in (("attention", {}),
                      ("attention_backward", {"deterministic": case["backward_deterministic"]})):
        spec = parse_spec(op, {**params, **extra})
        sprogram = plan_sprogram(spec, device, case["forward" if op == "attention" else
                                                     "backward"])
        rendered[op] = render(sprogram, spec, device).to_dict()
    return rendered


def serving_lookup(case: dict[str, Any], rendered: dict[str, dict[str, Any]]) -> Any:
    """A drop-in lookup whose cache holds the case's two kernels and nothing else."""
    wanted = {"attention": case["params"],
              "attention_backward": {**case["params"],
                                     "deterministic": case["backward_deterministic"]}}

    def lookup(op: str, params: dict[str, Any], _device: int) -> dict[str, Any] | None:
        return rendered[op] if op in wanted and params == wanted[op] else None

    return lookup


def step_inputs(torch: Any, params: dict[str, Any], seed: int) -> dict[str, Any]:
    """q, k, v (leaves wanting gradients) and the loss's gradient do, fresh random."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    dtype = getattr(torch, params["dtype"])

    def randn(heads: int, seq: int) -> Any:
        return torch.randn((params["batch"], heads, seq, params["head_dim"]),
                           generator=generator, device="cuda", dtype=dtype)

    q = randn(params["heads"], params["seq_q"]).requires_grad_(True)
    k, v = (randn(params["kv_heads"], params["seq_kv"]).requires_grad_(True) for _ in "kv")
    return {"q": q, "k": k, "v": v, "do": randn(params["heads"], params["seq_q"])}


def cudnn_attention(torch: Any, causal: bool) -> Any:
    """SDPA with cuDNN forced: GQA by ``enable_gqa`` where cuDNN takes it, else k and v
    repeated per query head (the call a PyTorch user falls back to)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    def call(q: Any, k: Any, v: Any) -> Any:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            if k.shape[1] == q.shape[1]:
                return sdpa(q, k, v, is_causal=causal)
            try:
                return sdpa(q, k, v, is_causal=causal, enable_gqa=True)
            except RuntimeError:
                group = q.shape[1] // k.shape[1]
                k, v = (x.repeat_interleave(group, dim=1) for x in (k, v))
                return sdpa(q, k, v, is_causal=causal)

    return call


def training_step(torch: Any, attention: Any, x: dict[str, Any]) -> Any:
    """One layer's attention in a training step: forward, then dq, dk, dv of ``do``."""
    o = attention(x["q"], x["k"], x["v"])
    return (o, *torch.autograd.grad(o, (x["q"], x["k"], x["v"]), x["do"]))


def errors(torch: Any, ours: tuple[Any, ...], x: dict[str, Any], causal: bool) -> dict:
    """Relative L2 errors of o, dq, dk, dv against SDPA's math backend in fp32 (one batch
    element at a time: the fp32 scores of a long sequence fill the GPU otherwise)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    group = x["q"].shape[1] // x["k"].shape[1]
    reference: list[list[Any]] = [[], [], [], []]
    for b in range(x["q"].shape[0]):
        wide = {n: t[b:b + 1].detach().float().requires_grad_(n != "do") for n, t in x.items()}
        with sdpa_kernel([SDPBackend.MATH]):
            o = sdpa(wide["q"], *(wide[n].repeat_interleave(group, dim=1) for n in "kv"),
                     is_causal=causal)
        grads = torch.autograd.grad(o, (wide["q"], wide["k"], wide["v"]), wide["do"])
        for parts, value in zip(reference, (o.detach(), *grads), strict=True):
            parts.append(value)
    wanted = [torch.cat(parts) for parts in reference]
    return {name: float((mine.float() - want).norm() / want.norm())
            for name, mine, want in zip(("o", "dq", "dk", "dv"), ours, wanted, strict=True)}


def run_case(torch: Any, case: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    import pipetune.torch as pt
    from bench.launch_overhead import three_figures

    params = case["params"]
    lookup = serving_lookup(case, artifacts(case, args.device))
    drop_ins = pt.DropIns(lookup=lookup)
    causal = bool(params["causal"])
    ours_attention = lambda q, k, v: drop_ins.attention(q, k, v, is_causal=causal)  # noqa: E731
    peer_attention = cudnn_attention(torch, causal)
    x = step_inputs(torch, params, args.seed)
    row: dict[str, Any] = {"params": params, "forward_choices": case["forward"],
                           "backward_choices": case["backward"],
                           "served_by_kernels": _served(drop_ins, case, x["q"])}
    row["rel_error"] = errors(torch, training_step(torch, ours_attention, x), x, causal)
    row["correct"] = max(row["rel_error"].values()) <= ERROR_BOUND
    calls = {"pipetune": lambda: training_step(torch, ours_attention, x),
             "peer": lambda: training_step(torch, peer_attention, x)}
    cycled = {label: [call] for label, call in calls.items()}
    row |= three_figures(torch, calls, cycled, (args.calls, args.calls), args.rounds,
                         args.cool_down_s, "cudnn")
    return row


def _served(drop_ins: Any, case: dict[str, Any], like: Any) -> bool:
    """Whether the drop-in loads both tuned kernels (else it would run SDPA's backward)."""
    backward = {**case["params"], "deterministic": case["backward_deterministic"]}
    return (drop_ins.kernel("attention", case["params"], like) is not None
            and drop_ins.kernel("attention_backward", backward, like) is not None)


def case_label(params: dict[str, Any]) -> str:
    return (f"{params['batch']}x{params['heads']}({params['kv_heads']})x{params['seq_q']}"
            f"xd{params['head_dim']}{'c' if params['causal'] else ''}-{params['dtype'][:4]}")


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Geometric means and least ratios of each figure over the correct cases."""
    counted = [r for r in rows if r["correct"] and r["served_by_kernels"]]
    summary: dict[str, Any] = {"cases": len(rows), "counted": len(counted)}
    for figure in FIGURES:
        ratios = [r[f"{figure}_ratio"] for r in counted]
        summary[f"{figure}_geomean"] = geomean(ratios)
        summary[f"{figure}_min"] = min(ratios, default=float("nan"))
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--forward-results", required=True)
    parser.add_argument("--backward-results", required=True)
    parser.add_argument("--only", nargs="*", default=None, help="case labels (list shows them)")
    parser.add_argument("--list", action="store_true", help="print the paired cases and stop")
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16"],
                        help="the cases' dtypes (training runs in bf16)")
    parser.add_argument("--device", default="h200", help="catalog device the kernels target")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20, help="steps per back-to-back figure")
    parser.add_argument("--cool-down-s", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--out", default=dated_result("attention-training"))
    args = parser.parse_args(argv)
    cases = paired_cases(*(json.loads(Path(p).read_text())
                           for p in (args.forward_results, args.backward_results)))
    cases = [c for c in cases if c["params"]["dtype"] in args.dtypes
             and (args.only is None or case_label(c["params"]) in args.only)]
    if args.list:
        print("\n".join(case_label(c["params"]) for c in cases))
        return 0
    import torch

    rows = []
    for case in cases:
        row = run_case(torch, case, args)
        rows.append(row)
        print(f"{case_label(case['params']):<28} err {max(row['rel_error'].values()):.1e}  "
              + "  ".join(f"{f} {row[f'{f}_ratio']:.3f}" for f in FIGURES), flush=True)
        write_json(args.out, {"suite": "attention_training",
                              "device": torch.cuda.get_device_name(), "tree": tree_state(),
                              "args": vars(args), "summary": summarize(rows), "cases": rows})
    print("summary", summarize(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
