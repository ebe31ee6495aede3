"""Why a tuned kernel is slower than its peer, for any operator: the kernel rebuilt from a
results file's stored choices and the peer's call, each launched inside an NVTX range
(``pipetune``, ``peer``) for Nsight Compute to profile side by side.

A case is a record of a bench results file with ``case``, ``params`` and ``choices``
(``bench/attention_backward.py``, ``bench/attention.py``, ...); ``--set KEY=VALUE``
changes its choices (a persistent twin of a grid winner, another order) before the
rebuild. Each kernel is checked against the fp32 reference before it is profiled.

    ncu --nvtx --nvtx-include "pipetune/" --nvtx-include "peer/" \\
        --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \\
        python3 bench/kernel_profile.py --op attention_backward \\
        --results bench/results/attention-backward-....json --case 8x32x2048xd128-floa-bhsd \\
        --peer sdpa_cudnn_backward > $OUT/ncu.txt

Without Nsight Compute it prints each kernel's mean time per launch (CUDA events).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: Launches of each kernel in its NVTX range (Nsight Compute replays each one).
LAUNCHES = 3


def stored_case(results: Path, name: str) -> dict[str, Any]:
    """The record of ``name`` in a results file (its params and choices)."""
    cases = json.loads(results.read_text())["cases"]
    found = [c for c in cases if c.get("case") == name and c.get("choices")]
    if not found:
        raise SystemExit(f"no case {name!r} with choices in {results}")
    return found[0]


def parse_settings(settings: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs, each value read as JSON where it parses (``true``, ``128``)."""
    changed: dict[str, Any] = {}
    for item in settings:
        key, _, text = item.partition("=")
        try:
            changed[key] = json.loads(text)
        except json.JSONDecodeError:
            changed[key] = text
    return changed


def rebuilt_artifact(op: str, params: dict[str, Any], choices: dict[str, Any],
                     device_name: str) -> Any:
    """The kernel of ``choices`` for ``params``, as the search renders it."""
    from codegen import feasibility, render
    from scheduler_search.hardware import get_device
    from scheduler_search.ops import parse_spec
    from scheduler_search.space import ScheduleSpace

    device = get_device(device_name)
    spec = parse_spec(op, params)
    sprogram, validity = ScheduleSpace(spec, device, feasibility(op, device)).build(choices)
    if not validity.ok:
        raise SystemExit(f"the choices do not build: {validity.rejections}")
    return render(sprogram, spec, device)


def timed_range(label: str, launches: Sequence[Callable[[], Any]],
                count: int = LAUNCHES) -> float:
    """Each of ``launches`` once outside the range (a new argument signature's host work
    stays out of it), then ``count`` launches cycling through them inside it (one per
    operand copy, where the copies keep the weights out of the L2); us per launch."""
    import cupy
    import torch

    for launch in launches:
        launch()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    cupy.cuda.Device().synchronize()
    torch.cuda.nvtx.range_push(label)
    start.record()
    for i in range(count):
        launches[i % len(launches)]()
    end.record()
    torch.cuda.nvtx.range_pop()
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) * 1e3 / count


def profile(op: str, params: dict[str, Any], artifact: Any, peer: str | None) -> dict[str, Any]:
    """Check the kernel against the reference, then time it and the peer in their ranges."""
    import cupy

    from workers import _dtypes
    from workers.baselines import prepare_baseline
    from workers.contract import contract
    from workers.inputs import build_inputs
    from workers.kernels import LoadedKernel
    from workers.l2_check import l2_check
    from workers.verify import reference

    specs = contract(op, params)
    dtypes = {name: spec.dtype for name, spec in specs.items()}
    inputs = build_inputs(cupy, op, params, dtypes, seed=1)
    kernel = LoadedKernel(artifact)
    outputs = kernel(**inputs)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    inputs32 = {n: _dtypes.to_float32(cupy, t, dtypes[n]) for n, t in inputs.items()}
    ref32 = reference(cupy, op, params, inputs32)
    row: dict[str, Any] = {"errors": {
        t.name: l2_check(_dtypes.to_float32(cupy, out, dtypes[t.name]), ref32[t.name])[0]
        for t, out in zip(kernel.outputs, outputs, strict=True)}}
    row["pipetune_us_per_launch"] = timed_range("pipetune", [lambda: kernel(**inputs)])
    if peer:
        tensors = {**inputs, **{t.name: cupy.empty(t.shape, _dtypes.storage_dtype(
            cupy, dtypes[t.name])) for t in kernel.outputs}}
        launch, finish = prepare_baseline(peer, op, params, tensors, dtypes)
        row["peer_us_per_launch"] = timed_range("peer", [launch])
        finish()
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", required=True)
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--case", required=True)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="choices changed before the rebuild")
    parser.add_argument("--peer", default=None, help="a workers.baselines peer name")
    parser.add_argument("--device", default="h200")
    args = parser.parse_args(argv)
    case = stored_case(args.results, args.case)
    choices = {**case["choices"], **parse_settings(args.set)}
    artifact = rebuilt_artifact(args.op, case["params"], choices, args.device)
    row = profile(args.op, case["params"], artifact, args.peer)
    print(json.dumps({"case": args.case, "choices": choices, **row}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
