"""The check's sums on the GPU in one kernel of our own: ‖out − ref‖², ‖ref‖² and the count
of non-finite outputs, in one pass.

Why not CuPy's reductions: each compiles with NVRTC the first time a machine runs it, at
about two seconds apiece. On a freshly started H200 (2026-12-04, bench/cold_start.py) the
check's ``isfinite().all()`` and two float64 sums took 7.8 s of the first measurement's
9.8 s, so a new machine's first tune waited that long for its first kernel; this kernel
has no headers and compiles in a fraction of a second, once a process.
"""

from __future__ import annotations

import math
from typing import Any

_SOURCE = r"""
extern "C" __global__ void pipetune_l2_sums(const float* __restrict__ out,
                                            const float* __restrict__ ref, long long n,
                                            double* __restrict__ sums,
                                            unsigned long long* __restrict__ nonfinite) {
  double diff2 = 0.0, ref2 = 0.0;
  unsigned long long bad = 0;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float o = out[i], r = ref[i];
    if ((__float_as_uint(o) & 0x7f800000u) == 0x7f800000u) { ++bad; continue; }
    const double d = (double)o - (double)r;
    diff2 += d * d;
    ref2 += (double)r * (double)r;
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    diff2 += __shfl_down_sync(0xffffffffu, diff2, offset);
    ref2 += __shfl_down_sync(0xffffffffu, ref2, offset);
    bad += __shfl_down_sync(0xffffffffu, bad, offset);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&sums[0], diff2);
    atomicAdd(&sums[1], ref2);
    if (bad) atomicAdd(nonfinite, bad);
  }
}
"""
_THREADS = 256
_MAX_BLOCKS = 1024

_kernel: Any = None


def _l2_sums_kernel() -> Any:
    """The kernel, compiled on first use in this process."""
    global _kernel
    if _kernel is None:
        import cupy

        _kernel = cupy.RawKernel(_SOURCE, "pipetune_l2_sums")
    return _kernel


def l2_check(out32: Any, ref32: Any) -> tuple[float, int]:
    """``(‖out − ref‖ / ‖ref‖, non-finite outputs)`` of two float32 CuPy arrays of one
    size; the ratio is NaN where any output is not finite (‖out − ref‖ where ‖ref‖ = 0)."""
    import cupy

    out = cupy.ascontiguousarray(out32, dtype=cupy.float32).ravel()
    ref = cupy.ascontiguousarray(ref32, dtype=cupy.float32).ravel()
    if out.size != ref.size:
        raise ValueError(f"output of {out.size} elements against a reference of {ref.size}")
    sums = cupy.zeros(2, dtype=cupy.float64)
    nonfinite = cupy.zeros(1, dtype=cupy.uint64)
    blocks = max(1, min(_MAX_BLOCKS, -(-out.size // _THREADS)))
    _l2_sums_kernel()((blocks,), (_THREADS,),
                      (out, ref, cupy.int64(out.size), sums, nonfinite))
    diff2, ref2 = (float(v) for v in sums.get())
    bad = int(nonfinite.get()[0])
    if bad:
        return float("nan"), bad
    num = math.sqrt(diff2)
    return (num / math.sqrt(ref2) if ref2 > 0 else num), 0


__all__ = ["l2_check"]
