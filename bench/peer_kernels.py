"""Which kernels the decode suite's peer launches: for every case of ``bench/decode.py``
(the models' weights at each m, bf16 through ``torch.nn.functional.linear`` and FP8
through ``torch._scaled_mm``), the CUDA kernels PyTorch's profiler sees in one call and
their times.

cuBLAS names its kernels by plan (tile shape, cluster, split-K or stream-K, swap), so the
list says which designs the vendor picked where pipetune's search must match it: a lead
for the schedule space, not a suite figure.

    PYTHONPATH=. python3 bench/peer_kernels.py --out $OUT/peer-kernels.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import dated_result, tree_state, write_json  # noqa: E402
from bench.decode import M_SIZES, MODELS, decode_cases, random_operand, random_scales  # noqa: E402


def peer_call(torch: Any, m: int, n: int, k: int, dtype: str) -> Any:
    """The decode bench's peer for one case, as a zero-argument call."""
    a = random_operand(torch, (m, k), dtype)
    w = random_operand(torch, (n, k), dtype)
    scales = random_scales(torch, dtype)
    if scales is None:
        return lambda: torch.nn.functional.linear(a, w)
    scale_a, scale_b = scales
    return lambda: torch._scaled_mm(a, w.t(), scale_a=scale_a, scale_b=scale_b,
                                    out_dtype=torch.bfloat16)


def kernels_of(torch: Any, call: Any) -> list[dict[str, Any]]:
    """The CUDA kernels one call launches (after a warm-up call), with their times."""
    from torch.profiler import ProfilerActivity, profile

    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA], record_shapes=False) as prof:
        call()
        torch.cuda.synchronize()
    found = []
    for event in prof.events():
        if event.device_type.name != "CUDA":
            continue
        us = getattr(event, "device_time", None) or getattr(event, "cuda_time", 0.0)
        found.append({"name": event.name, "us": us})
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS))
    parser.add_argument("--m", nargs="+", type=int, default=list(M_SIZES))
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float8_e4m3"])
    parser.add_argument("--out", default=dated_result("peer-kernels"))
    args = parser.parse_args(argv)
    import torch

    rows = []
    for case in decode_cases(args.models, args.m, args.dtypes):
        found = kernels_of(torch, peer_call(torch, case.m, case.n, case.k, case.dtype))
        rows.append({"m": case.m, "n": case.n, "k": case.k, "dtype": case.dtype,
                     "kernels": found})
        names = "; ".join(f"{k['name'][:110]} ({k['us']:.1f} us)" for k in found)
        print(f"{case.m}x{case.n}x{case.k} {case.dtype}: {names}", flush=True)
    write_json(args.out, {**tree_state(), "torch_version": torch.__version__, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
