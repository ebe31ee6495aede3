"""``pipetune render OP --PARAM VALUE ... [--device D] [--top N] --out DIR [--check]
[--fix KNOB=VALUE ...]``.

Writes, for the top N schedules of the workload's space by the cost model, the generated
kernel ``<hash>.cu`` and its launch contract ``<hash>.json`` (the KernelArtifact), so
anyone can compile and inspect what pipetune generates. With ``--check`` each source is
also compiled with nvcc for sm_90a and its registers and spills are printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError

from scheduler_search.ops import SpecError
from service.commands._params import describe_errors, spec_from_cli
from service.commands.options import (
    PhaseBar,
    add_fix_option,
    add_operator_parser,
    device_model,
)
from service.runs.devices import DeviceError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_operator_parser(
        subparsers, "render",
        help="write the generated kernels (.cu) and launch contracts (.json) of the best schedules",
        description=__doc__,
        example="pipetune render gemm --m 4096 --n 4096 --k 4096 --dtype fp16 --b-layout nk "
        "--top 3 --out kernels/",
    )
    parser.add_argument("--top", type=int, default=1, help="schedules to render (default 1)")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--check", action="store_true", help="compile each with nvcc")
    add_fix_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, extra: list[str], parser: argparse.ArgumentParser) -> int:
    from codegen import has_renderer, render
    from scheduler_search.space import rank_top
    from service.runs.space import schedule_space

    if args.top < 1:
        parser.error("--top must be >= 1")
    try:
        spec = spec_from_cli(args.op, extra)
        device = device_model(args.device)
        spec.check_fits(device)
    except (SpecError, ValidationError) as error:
        for line in describe_errors(error):
            print(f"pipetune render: {line}", file=sys.stderr)
        return 2
    except DeviceError as error:
        print(f"pipetune render: device: {error}", file=sys.stderr)
        return 2
    if not has_renderer(spec.op):
        print(f"pipetune render: no code generator for {spec.op} yet", file=sys.stderr)
        return 2
    try:
        space = schedule_space(spec, device, dict(args.fix))
    except ValueError as error:  # --fix: a knob or option the space does not have
        print(f"pipetune render: --fix: {error}", file=sys.stderr)
        return 2
    bar = PhaseBar()
    candidates, count = space.enumerate(on_tile=bar.phase("enumerating tiles"))
    if not candidates:
        bar.close()
        print("pipetune render: the schedule space is empty", file=sys.stderr)
        return 1
    ranked = rank_top(space, candidates, args.top, on_bound=bar.phase("ranking schedules"))
    bar.close()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"{spec.op} {spec.params()} on {device.name}: {count.valid:,} renderable schedules")
    for rank, item in enumerate(ranked, start=1):
        artifact = render(item.sprogram, spec, device)
        stem = args.out / item.sprogram.hash
        stem.with_suffix(".cu").write_text(artifact.source)
        stem.with_suffix(".json").write_text(artifact.to_json() + "\n")
        line = (
            f"{rank:>3}. {item.sprogram.hash[:16]}  {item.estimate.latency_us:9.1f} us (model)  "
            f"grid {artifact.grid[0]} x {artifact.block[0]} threads, "
            f"{artifact.dynamic_smem_bytes} B smem -> {stem}.cu"
        )
        if args.check:
            from codegen.export import build_target
            from codegen.nvcc import compile_report

            report = compile_report(artifact.source, target=build_target(artifact))
            line += (
                f"  [nvcc: {report.registers} regs, {report.spills} B spilled]"
                if report.ok
                else "  [nvcc: FAILED]"
            )
        print(line)
    return 0
