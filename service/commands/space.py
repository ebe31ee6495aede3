"""``pipetune space OP --PARAM VALUE ... [--device auto|sim:NAME|cuda:N] [--top N] [--json]
[--fix KNOB=VALUE ...]``.

Prints the size of the schedule space of one workload on one device (or of the slice
``--fix`` holds), the rejections by reason, and the best schedules by the cost model
(hash, estimate and the sProgram). On a simulated device with a shipped calibration
(sim:h200 GEMMs) the estimates are calibrated, as the simulated device's own: a
schedule's figure here is the latency its runs report.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from pydantic import ValidationError

from scheduler_search.cost_model import Calibration, shipped_calibration
from scheduler_search.ops import OperatorSpec, SpecError
from scheduler_search.space import Ranked, rank_top
from service.commands._params import describe_errors, spec_from_cli
from service.commands.options import PhaseBar, add_fix_option, add_operator_parser
from service.runs.devices import DeviceError, resolve_device
from service.runs.space import schedule_space


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_operator_parser(
        subparsers, "space",
        help="size, rejections and best schedules of a workload's schedule space",
        description=__doc__,
        example="pipetune space gemm --m 4096 --n 4096 --k 4096 --dtype fp16 --device sim:h200",
    )
    parser.add_argument("--top", type=int, default=5, help="schedules to print (default 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    add_fix_option(parser)
    parser.set_defaults(handler=run)


def space_report(op: str, extra: list[str], device_name: str, top: int,
                 bar: PhaseBar | None = None, fixed: dict[str, Any] | None = None,
                 ) -> dict[str, Any]:
    """The whole report as plain data (what ``--json`` prints); ``bar`` shows progress.

    Raises:
        ValueError: ``fixed`` names a knob the space lacks or an option the knob lacks.
    """
    bar = bar or PhaseBar(enabled=False)
    spec = spec_from_cli(op, extra)
    resolved = resolve_device(device_name)
    device = resolved.model
    spec.check_fits(device)
    # A simulated device measures with the calibration pipetune ships where it has one:
    # rank and report with it, so that a schedule's figure here is the one its runs report.
    calibration = shipped_calibration(device.name, spec.op) if resolved.simulated else None
    started = time.perf_counter()
    space = schedule_space(spec, calibration.device(device) if calibration else device, fixed)
    candidates, count = space.enumerate(on_tile=bar.phase("enumerating tiles"))
    enumerated = time.perf_counter()
    ranked = (rank_top(space, candidates, top, calibration.timings() if calibration else None,
                       on_bound=bar.phase("ranking schedules"))
              if top > 0 else [])
    bar.close()
    ranked_s = time.perf_counter() - enumerated
    return {
        "op": spec.op,
        "params": spec.params(),
        "workload_key": spec.workload_key(),
        "fixed": dict(fixed or {}),
        "device": {"name": device.name, "fingerprint": device.fingerprint()},
        "calibrated": calibration is not None,
        "total": count.total,
        "valid": count.valid,
        "rejected": dict(sorted(count.rejected.items())),
        "structural_valid": len(candidates),
        "enumerate_s": round(enumerated - started, 3),
        "rank_s": round(ranked_s, 3),
        "top": _top(spec, ranked, calibration),
    }


def _top(spec: OperatorSpec, ranked: list[Ranked],
         calibration: Calibration | None) -> list[dict[str, Any]]:
    """The ranked schedules as reported, by their (calibrated) latency, best first."""
    entries = []
    for r in ranked:
        latency_us = (calibration.scaled_us(r.estimate.latency_us, r.estimate.bound, spec)
                      if calibration is not None else r.estimate.latency_us)
        entries.append({
            "hash": r.sprogram.hash,
            "latency_us": round(latency_us, 3),
            "tflops": round(spec.flops() / latency_us / 1e6, 1),
            "bound": r.estimate.bound,
            "dram_us": round(r.estimate.dram_us, 3),
            "choices": r.sprogram.choices,
            "schedule": r.sprogram.to_dict(),
        })
    entries.sort(key=lambda entry: entry["latency_us"])
    return [{"rank": i + 1, **entry} for i, entry in enumerate(entries)]


def _print_table(report: dict[str, Any]) -> None:
    print(f"{report['op']} {report['params']} on {report['device']['name']}")
    print(f"schedules: {report['total']:,} in all, {report['valid']:,} valid")
    for reason, count in report["rejected"].items():
        print(f"  rejected {reason:<22} {count:>12,}")
    if not report["top"]:
        return
    how = ("calibrated on the GPU's measurements: the figure a run on this simulated "
           "device reports" if report["calibrated"] else "the analytic cost model")
    print(f"\ntop {len(report['top'])} by the cost model ({how}):")
    for entry in report["top"]:
        choices = " ".join(f"{k}={v}" for k, v in entry["choices"].items())
        print(
            f"{entry['rank']:>3}. {entry['latency_us']:>10.1f} us {entry['tflops']:>7.1f} TFLOP/s "
            f"{entry['bound']:<8} {entry['hash'][:16]}  {choices}"
        )


def run(args: argparse.Namespace, extra: list[str], parser: argparse.ArgumentParser) -> int:
    if args.top < 0:
        parser.error("--top must be >= 0")
    try:
        report = space_report(args.op, extra, args.device, args.top, PhaseBar(),
                              dict(args.fix))
    except (SpecError, ValidationError) as error:
        for line in describe_errors(error):
            print(f"pipetune space: {line}", file=sys.stderr)
        return 2
    except DeviceError as error:  # a ValueError too: caught first
        print(f"pipetune space: --device: {error}", file=sys.stderr)
        return 2
    except ValueError as error:  # --fix: a knob or option the space does not have
        print(f"pipetune space: --fix: {error}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_table(report)
    return 0
