"""Where a decode kernel's time goes, block by block: when each block started, reached its
first stream-K part and ended, on which SM.

Nsight Compute read pipetune's 128 x 1280 x 8192 kernel with its SMs active only 70% of
the elapsed cycles (2026-12-04): some blocks end long before others. This probe rebuilds a
``bench/decode.py`` case's tuned kernel (as ``bench/decode_profile.py`` does), adds a
block clock to its source (the global timer and the SM's cycle counter when the block
starts, when its consumers reach their first stream-K part, and when its last warp
leaves), checks it, launches it over weights not in L2, and reads the clock back. Rows
per block, and a summary: the spread of starts and ends, how long the SMs sat idle after
their block ended, and when the stream-K parts began against the block's whole time.

    PYTHONPATH=. python3 bench/decode_timeline.py \\
        --results bench/results/decode-bf16-llama-3-70b-tp8-mixtral-2026-12-04.json \\
        --cases gemm-128x1280x8192-bf16-nk --out $OUT/decode-timeline.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import write_json  # noqa: E402
from bench.decode import check, gemm_calls, random_operand, random_scales  # noqa: E402
from bench.decode_profile import artifact_of, stored_cases  # noqa: E402
from scheduler_search.ops import DTYPE_BYTES  # noqa: E402

#: The clock's slots a block: start, first stream-K part, end (global timer, ns), then
#: the same three on the SM's cycle counter, then the SM.
SLOTS = ("start_ns", "part_ns", "end_ns", "start_clk", "part_clk", "end_clk", "sm")
#: The most blocks a clocked launch may have.
MAX_BLOCKS = 4096
#: A slot no block wrote (a block without stream-K parts).
UNSET = (1 << 64) - 1

_CLOCK = f"""
// bench/decode_timeline.py: a clock per block ({', '.join(SLOTS)}).
__device__ unsigned long long pipetune_timeline[{MAX_BLOCKS} * {len(SLOTS)}];
__device__ __forceinline__ unsigned long long pt_ns() {{
  unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}}
__device__ __forceinline__ void pt_mark(int slot) {{
  unsigned long long* row = pipetune_timeline + blockIdx.x * {len(SLOTS)};
  atomicMin(row + slot, pt_ns());
  atomicMin(row + slot + 3, (unsigned long long)clock64());
}}
struct PtBlockClock {{
  __device__ PtBlockClock() {{
    if (threadIdx.x == 0) {{
      unsigned sm; asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
      pt_mark(0);
      pipetune_timeline[blockIdx.x * {len(SLOTS)} + 6] = sm;
    }}
  }}
  __device__ ~PtBlockClock() {{
    if ((threadIdx.x & 31) == 0) {{
      unsigned long long* row = pipetune_timeline + blockIdx.x * {len(SLOTS)};
      atomicMax(row + 2, pt_ns());
      atomicMax(row + 5, (unsigned long long)clock64());
    }}
  }}
}};
"""
#: The comment the stream-K fix-up opens with (``codegen.pipeline.stream_k``).
_PART_MARK = "// stream-K: this is one part of a shared tile"


def clocked_source(source: str, entry: str) -> str:
    """``source`` with the block clock: its globals before the kernel ``entry``, a clock
    object at the top of its body (its destructor stamps each warp's exit), a stamp where
    the consumers reach a stream-K part."""
    head = re.search(rf'extern "C" __global__[^{{]*\b{re.escape(entry)}\s*\(', source)
    if head is None:
        raise ValueError(f"no kernel {entry} in the source")
    body = source.index("{", head.end())
    part = ("if (consumer == 0 && thread_in_wg == 0) pt_mark(1);  "
            "// bench/decode_timeline.py\n")
    clocked = (source[:head.start()] + _CLOCK + source[head.start():body + 1]
               + "\n  PtBlockClock pt_block_clock;  // bench/decode_timeline.py\n"
               + source[body + 1:])
    return re.sub(rf"^(\s*){re.escape(_PART_MARK)}\n",
                  lambda m: f"{m.group(0)}{m.group(1)}{part}", clocked, flags=re.M)


def block_rows(values: list[int], blocks: int) -> list[dict[str, int | None]]:
    """The clock read back, a row a block, times from the earliest start (ns) and from
    each block's own start (cycles); None where a block wrote no stamp."""
    rows = [dict(zip(SLOTS, values[b * len(SLOTS):(b + 1) * len(SLOTS)], strict=True))
            for b in range(blocks)]
    t0 = min(r["start_ns"] for r in rows)
    out = []
    for row in rows:
        part = None if row["part_ns"] == UNSET else row["part_ns"] - t0
        part_clk = None if row["part_clk"] == UNSET else row["part_clk"] - row["start_clk"]
        out.append({"sm": row["sm"], "start_ns": row["start_ns"] - t0, "part_ns": part,
                    "end_ns": row["end_ns"] - t0,
                    "part_cycles": part_clk, "cycles": row["end_clk"] - row["start_clk"]})
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The kernel's span, the spread of starts and ends, the SMs' idle time after their
    block ended, and how far into its time a block reached its first stream-K part."""
    span = max(r["end_ns"] for r in rows)
    ends = sorted(r["end_ns"] for r in rows)
    idle = [span - r["end_ns"] for r in rows]
    parts = [r["part_cycles"] / r["cycles"] for r in rows
             if r["part_cycles"] is not None and r["cycles"]]
    return {
        "blocks": len(rows), "span_ns": span,
        "start_ns_max": max(r["start_ns"] for r in rows),
        "end_ns_quartiles": statistics.quantiles(ends, n=4) if len(ends) > 1 else ends,
        "end_ns_min": ends[0],
        "sm_idle_fraction": sum(idle) / (span * len(rows)) if span else 0.0,
        "part_at_fraction_median": statistics.median(parts) if parts else None,
    }


def clock_case(torch: Any, case: dict[str, Any], l2_bytes: int) -> dict[str, Any]:
    """Rebuild, clock, check and launch one case's kernel over a weight out of L2."""
    import cupy

    import pipetune
    from bench.decode import weight_copies

    params = case["params"]
    m, n, k, dtype = params["m"], params["n"], params["k"], params["dtype"]
    artifact = artifact_of(case)
    artifact["source"] = clocked_source(artifact["source"], artifact["entry"])
    blocks = artifact["grid"][0] * artifact["grid"][1] * artifact["grid"][2]
    if blocks > MAX_BLOCKS:
        raise SystemExit(f"{case['case']}: {blocks} blocks, the clock holds {MAX_BLOCKS}")
    kernel = pipetune.load(artifact)
    a, scales = random_operand(torch, (m, k), dtype), random_scales(torch, dtype)
    copies = weight_copies(n * k * DTYPE_BYTES[dtype], l2_bytes)
    weights = [random_operand(torch, (n, k), dtype) for _ in range(copies)]
    calls = [gemm_calls(torch, kernel, a, w, scales)["pipetune"] for w in weights]
    errors = check(torch, gemm_calls(torch, kernel, a, weights[0], scales), a, weights[0],
                   scales)
    for call in calls[1:]:  # warm every copy's path; the last leaves weights[0] cold
        call()
    clock = kernel.module.global_array("pipetune_timeline", torch.cuda.current_device(),
                                       "uint64", MAX_BLOCKS * len(SLOTS))
    clock[...] = cupy.uint64(UNSET)  # the starts and parts take the earliest stamp
    for slot in (2, 5, 6):  # the exits take the latest; the SM is written once
        clock[slot::len(SLOTS)] = 0
    torch.cuda.synchronize()
    calls[0]()
    torch.cuda.synchronize()
    values = [int(v) for v in cupy.asnumpy(clock[: blocks * len(SLOTS)])]
    rows = block_rows(values, blocks)
    return {"case": case["case"], "choices": case["schedule"]["choices"], "check": errors,
            "summary": summary(rows), "blocks": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, required=True,
                        help="a bench/decode.py results file")
    parser.add_argument("--cases", nargs="*", default=[], help="case names (default: all)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    import torch

    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    rows = []
    for case in stored_cases(args.results, args.cases):
        row = clock_case(torch, case, l2_bytes)
        rows.append(row)
        print(json.dumps({"case": row["case"], **row["summary"]}), flush=True)
        write_json(args.out, {"results": str(args.results), "cases": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
