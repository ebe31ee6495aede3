"""Why a decode GEMM is slower than its peer: pipetune's tuned kernel and the peer's call,
each launched over weight copies beyond twice the L2 inside an NVTX range, for Nsight
Compute to profile side by side (DRAM and L2 throughput, stalls).

The cases and their schedules come from a ``bench/decode.py`` results file (``--results``):
the kernel is rebuilt from the stored choices (``ScheduleSpace.build`` and ``render``), so
the profile is of the kernel the bench timed, and it is checked against the peer's output
before it is profiled.

    ncu --nvtx --nvtx-include "pipetune/" --nvtx-include "peer/" \\
        --section SpeedOfLight --section MemoryWorkloadAnalysis \\
        --section WarpStateStats --section LaunchStats \\
        python3 bench/decode_profile.py --results bench/results/decode-....json \\
        --cases gemm-128x1280x8192-bf16-nk > $OUT/ncu-decode.txt

Without Nsight Compute it prints each kernel's mean time per launch (CUDA events), a
sanity check that the rebuilt kernel is the one the bench timed.
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

from bench.decode import (  # noqa: E402
    check,
    gemm_calls,
    random_operand,
    random_scales,
    weight_copies,
)
from bench.kernel_profile import rebuilt_artifact, timed_range  # noqa: E402
from scheduler_search.ops import DTYPE_BYTES  # noqa: E402

#: Launches of each kernel in its NVTX range (Nsight Compute skips and profiles some).
LAUNCHES = 8


def stored_cases(results: Path, names: list[str]) -> list[dict[str, Any]]:
    """The results file's cases named in ``names`` (all when empty) that have a schedule."""
    doc = json.loads(results.read_text())
    cases = [c for c in doc["cases"] if (not names or c["case"] in names)
             and (c.get("schedule") or {}).get("choices")]
    missing = sorted(set(names) - {c["case"] for c in cases})
    if missing:
        raise SystemExit(f"no stored schedule for {missing} in {results}")
    return cases


def artifact_of(case: dict[str, Any]) -> dict[str, Any]:
    """The case's kernel rebuilt from its stored choices, as ``pipetune.load`` takes it."""
    return rebuilt_artifact("gemm", case["params"], case["schedule"]["choices"],
                            "h200").to_dict()


def profile_case(torch: Any, case: dict[str, Any], l2_bytes: int) -> dict[str, Any]:
    """Check the rebuilt kernel, then launch it and the peer in their NVTX ranges, each
    cycling over weight copies beyond twice the L2; their mean times per launch."""
    import pipetune

    params = case["params"]
    m, n, k, dtype = params["m"], params["n"], params["k"], params["dtype"]
    kernel = pipetune.load(artifact_of(case))
    a, scales = random_operand(torch, (m, k), dtype), random_scales(torch, dtype)
    copies = weight_copies(n * k * DTYPE_BYTES[dtype], l2_bytes)
    weights = [random_operand(torch, (n, k), dtype) for _ in range(copies)]
    per_copy = [gemm_calls(torch, kernel, a, w, scales) for w in weights]
    errors = check(torch, per_copy[0], a, weights[0], scales)
    row: dict[str, Any] = {"case": case["case"], "choices": case["schedule"]["choices"],
                           "check": errors}
    # Each range is named by its label alone: Nsight Compute's include filter reads a "/"
    # in a name as nesting, and "pipetune/gemm-..." matched no kernel (2026-12-04). Cases
    # run in the order of the printed rows.
    for label in ("pipetune", "peer"):
        row[f"{label}_us_per_launch"] = timed_range(label, [c[label] for c in per_copy],
                                                    LAUNCHES)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, required=True,
                        help="a bench/decode.py results file")
    parser.add_argument("--cases", nargs="*", default=[], help="case names (default: all)")
    args = parser.parse_args(argv)
    import torch

    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    for case in stored_cases(args.results, args.cases):
        row = profile_case(torch, case, l2_bytes)
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
