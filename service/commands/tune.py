"""``pipetune tune OP --PARAM VALUE ... [--device] [--trials] [--seconds]``.

Tunes one workload in this process, with a progress bar, against the same database as
the server (so the result is cached for it), and prints the best schedule, its latency,
and on a GPU its speed against the vendor baseline (cuBLAS for a GEMM), how the two were
timed (CUDA events, or a CUDA graph's replay for a short or memory-bound workload), and
the hash of its kernel (``GET /v1/kernels/{hash}``; ``--kernel-out FILE`` writes the KernelArtifact
JSON, which ``workers.load`` runs). A cached schedule is printed at once, unless
``--force`` (a new run all the same) or ``--extend`` (continue the workload's newest run
with the budget given, its trials kept).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from scheduler_search.ops import SpecError
from service.commands._params import describe_errors, parse_params
from service.commands.options import add_operator_parser
from service.runs.in_process import tune_locally

if TYPE_CHECKING:
    pass


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_operator_parser(
        subparsers, "tune", help="tune a workload here, with a progress bar",
        description=__doc__,
        example="pipetune tune gemm --m 4096 --n 4096 --k 4096 --dtype fp16 "
        "--device sim:h200 --trials 64",
        pipelines=True,
    )
    parser.add_argument("--trials", type=int, default=None, help="measured trials (default 64)")
    parser.add_argument("--seconds", type=float, default=None, help="time budget in seconds")
    parser.add_argument("--patience", type=int, default=None,
                        help="stop after this many measured trials without a new best")
    again = parser.add_mutually_exclusive_group()
    again.add_argument("--force", action="store_true",
                       help="tune even if the cache holds the workload (the cache keeps the "
                       "faster schedule)")
    again.add_argument("--extend", action="store_true",
                       help="continue the workload's newest run with this budget more (its "
                       "trials are kept and never measured again)")
    parser.add_argument("--database-url", default=None, help="SQLAlchemy URL")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--kernel-out", default=None, metavar="FILE",
                        help="write the best kernel's KernelArtifact JSON here (on a "
                        "simulated device: rendered, never run); an error if there is none; "
                        "for a pipeline, its kernels' artifacts by role")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, extra: list[str], parser: argparse.ArgumentParser) -> int:
    from service.errors import InvalidRequest
    from service.schemas import TuneRequest

    try:
        params = parse_params(args.op, extra)
    except (SpecError, ValidationError) as error:
        for line in describe_errors(error):
            print(f"pipetune tune: {line}", file=sys.stderr)
        return 2
    budget = {k: v for k, v in (("trials", args.trials), ("seconds", args.seconds),
                                ("patience", args.patience)) if v is not None}
    try:
        request = TuneRequest(op=args.op, params=params, device=args.device, budget=budget,
                              force=args.force, extend=args.extend)
    except ValidationError as error:
        for e in error.errors():
            print(f"pipetune tune: {'.'.join(map(str, e['loc']))}: {e['msg']}", file=sys.stderr)
        return 2
    try:
        result = tune_locally(request, args.database_url)
    except InvalidRequest as error:
        for e in error.errors:
            print(f"pipetune tune: {'.'.join(map(str, e['loc']))}: {e['msg']}", file=sys.stderr)
        return 2
    kernel = result.pop("kernel", None)
    if result.get("pipeline") is not None:
        kernel = result.pop("kernels", None) or None
    if args.kernel_out and kernel is None:
        reason = result.get("error") or f"no kernel is generated for {args.op}"
        print(f"pipetune tune: --kernel-out: nothing to write ({reason})", file=sys.stderr)
        return 1
    if args.kernel_out:
        with open(args.kernel_out, "w") as f:
            json.dump(kernel, f)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print(result)
        if args.kernel_out and kernel is not None:
            print(f"kernel artifact written to {args.kernel_out}")
    found = result.get("latency_us") is not None or result.get("range") is not None
    return 0 if found else 1


def _print_range(result: dict[str, Any]) -> None:
    table = result["range"]
    source = "cached" if result["cached"] else f"run {result['run']['id']}"
    if not result["cached"]:
        run = result["run"]
        source += f", {run['trials_done']} measured in {run['elapsed_s']:.1f} s"
    simulated = " (simulated: cost-model estimates, no kernel ran)" if table["simulated"] else ""
    print(f"{table['op']} {table['params']} on {table['device']} ({source}){simulated}")
    print(f"range table {table['id']}: {len(table['buckets'])} buckets over {table['dim']} "
          f"{table['low']}..{table['high']}, loss {table['loss']:.3f} "
          f"(GET /v1/ranges/{table['id']})")
    for bucket in table["buckets"]:
        kernel = bucket["kernel_hash"][:16] if bucket["kernel_hash"] else "no kernel"
        print(f"  {table['dim']} {bucket['low']:>7}..{bucket['high']:<7} loss "
              f"{bucket['loss']:.3f}  kernel {kernel}")


def _print_pipeline(result: dict[str, Any]) -> None:
    pipeline = result["pipeline"]
    print(f"{pipeline['op']} {pipeline['params']} on {pipeline['device']} "
          f"({'cached' if result['cached'] else 'tuned'})")
    for kernel in pipeline["kernels"]:
        schedule, run = kernel["schedule"], kernel["run"] or {}
        figure = (f"{schedule['latency_us']:.3f} us" if schedule is not None
                  else f"no schedule: run {run.get('id')} {run.get('status')}")
        print(f"  {kernel['role']:<13} {kernel['op']:<19} {figure}")
    for name, plan in pipeline["plans"].items():
        cost = f"{plan['latency_us']:.3f} us" if plan["latency_us"] is not None else "unmeasured"
        served = "  <- served" if name == pipeline["plan"] else ""
        print(f"plan {name}: {' -> '.join(plan['kernels'])}: {cost}{served}")


def _print(result: dict[str, Any]) -> None:
    from service.schemas import timing_method_text

    if result.get("range") is not None:
        _print_range(result)
        return
    if result.get("pipeline") is not None:
        _print_pipeline(result)
        return
    if result.get("latency_us") is None:
        run = result.get("run", {})
        print(f"no schedule: run {run.get('id')} {run.get('status')}: {result.get('error')}")
        return
    source = "cached" if result["cached"] else f"run {result['run']['id']}"
    if not result["cached"]:
        run = result["run"]
        source += f", {run['trials_done']} measured in {run['elapsed_s']:.1f} s"
    simulated = " (simulated: a cost-model estimate, no kernel ran)" if result["simulated"] else ""
    workload = result["workload"]
    print(f"{workload['op']} {workload['params']} on {result['device']} ({source})")
    print(f"best: {result['latency_us']:.3f} us{simulated}  schedule {result['schedule_hash']}")
    # Ours and the peers alike were timed by the workload's method: said with each figure.
    timed = timing_method_text(result.get("timing_method"))
    timed = f" ({timed})" if timed else ""
    if result.get("baseline_latency_us"):
        speed = result["speedup_vs_baseline"]
        print(f"vs {result['baseline']}{timed}: {result['baseline_latency_us']:.3f} us -> "
              f"{speed:.3f}x ({'faster' if speed >= 1 else 'slower'} than {result['baseline']})")
    elif result.get("baseline"):
        print(f"vs {result['baseline']}: the baseline could not be measured")
    for name, latency in ((result.get("run") or {}).get("peers") or {}).items():
        print(f"vs {name}{timed}: {latency:.3f} us -> {latency / result['latency_us']:.3f}x")
    if result.get("kernel_hash"):
        print(f"kernel: {result['kernel_hash']}  (GET /v1/kernels/{result['kernel_hash']})")
    if result.get("range_id") is not None:
        print(f"served by tuned range {result['range_id']} (GET /v1/ranges/"
              f"{result['range_id']}); latency interpolated between its measured sizes")
    print("choices: " + " ".join(f"{k}={v}" for k, v in result["choices"].items()))
