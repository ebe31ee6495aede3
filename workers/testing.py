"""Helpers for testing executors and workers, shipped so other executors can reuse them.

- Hand-written, correct GEMM kernels as KernelArtifacts: a shared-memory tiled kernel and
  a TMA one that loads its tiles through two tensor maps (``gemm_tiled_artifact``,
  ``gemm_tma_artifact``). They follow the launch contract of ``codegen.artifact`` and are
  header-free (element conversions in inline PTX), as generated kernels are under NVRTC.
- A stand-in worker process (``standin_worker_main``) and compiler (``StandinCompiler``)
  that follow the worker protocol without a GPU, driven by ``artifact.extra["standin"]``.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

from codegen.artifact import KernelArtifact, ScalarArg, TensorArg, TensorMapArg
from scheduler_search.ops import workload_tensors
from workers.compile import CompileResult
from workers.protocol import Job, Measurement, MeasurementStatus

#: cudaDeviceProp of the lent H200 as CuPy's getDeviceProperties returns it: live
#: properties for tests of device construction and GPU runs on a machine without a GPU.
H200_PROPS: dict[str, Any] = {
    "name": b"NVIDIA H200",
    "major": 9,
    "minor": 0,
    "multiProcessorCount": 132,
    "sharedMemPerMultiprocessor": 233472,
    "sharedMemPerBlockOptin": 232448,
    "regsPerMultiprocessor": 65536,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiProcessor": 2048,
    "l2CacheSize": 62914560,
    "clockRate": 1980000,
    "totalGlobalMem": 150754820096,
    "memoryClockRate": 2619000,
    "memoryBusWidth": 6144,
}

_CONVERT = r"""
// Element conversions in inline PTX (PTX ISA "cvt"), so no fp16/bf16 header is needed.
__device__ __forceinline__ float elem_to_float(unsigned short bits) {
#if ELEM_BF16
  return __uint_as_float(((unsigned int)bits) << 16);
#else
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
  return f;
#endif
}
__device__ __forceinline__ unsigned short float_to_elem(float f) {
  unsigned short bits;
#if ELEM_BF16
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(f));
#else
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(f));
#endif
  return bits;
}
"""

_TILED_BODY = r"""
// C (m x n) = A (m x k) * B; 64x64 output tile per block, 256 threads, 4x4 per thread.
#define BM 64
#define BN 64
#define BK 16
extern "C" __global__ void __launch_bounds__(256)
gemm_tiled(const unsigned short* __restrict__ a, const unsigned short* __restrict__ b,
           unsigned short* __restrict__ c, int m, int n, int k) {
  __shared__ float a_tile[BK][BM];
  __shared__ float b_tile[BK][BN];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < k; k0 += BK) {
    for (int i = threadIdx.x; i < BM * BK; i += blockDim.x) {
      const int r = i / BK, kk = i % BK, gr = row0 + r, gk = k0 + kk;
      a_tile[kk][r] = (gr < m && gk < k) ? elem_to_float(a[(long long)gr * k + gk]) : 0.f;
    }
    for (int i = threadIdx.x; i < BK * BN; i += blockDim.x) {
      const int kk = i / BN, cc = i % BN, gk = k0 + kk, gc = col0 + cc;
#if B_NK
      const long long b_index = (long long)gc * k + gk;
#else
      const long long b_index = (long long)gk * n + gc;
#endif
      b_tile[kk][cc] = (gk < k && gc < n) ? elem_to_float(b[b_index]) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = a_tile[kk][ty * 4 + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) bv[j] = b_tile[kk][tx * 4 + j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int r = row0 + ty * 4 + i, cc = col0 + tx * 4 + j;
      if (r < m && cc < n) c[(long long)r * n + cc] = float_to_elem(acc[i][j]);
    }
}
"""

_TMA_BODY = r"""
// C (m x n) = A (m x k) * B (k x n), fp32 accumulation; A and B tiles arrive by TMA
// (cp.async.bulk.tensor, PTX ISA 9.7.9.25) into shared memory, guarded by one mbarrier.
#define BM 64
#define BN 64
#define BK 32
struct alignas(64) TensorMap { unsigned long long opaque[16]; };

__device__ __forceinline__ unsigned int smem_addr(const void* p) {
  return (unsigned int)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void mbar_init(unsigned int bar, unsigned int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(unsigned int bar, unsigned int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned int bar, unsigned int phase) {
  unsigned int done = 0;
  while (!done) {
    asm volatile("{\n .reg .pred p;\n"
                 " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 " selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(phase) : "memory");
  }
}
__device__ __forceinline__ void tma_load_2d(unsigned int dst, const TensorMap* map,
                                            int c0, int c1, unsigned int bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3}], [%4];"
               :: "r"(dst), "l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(bar)
               : "memory");
}

extern "C" __global__ void __launch_bounds__(256)
gemm_tma(const __grid_constant__ TensorMap a_map, const __grid_constant__ TensorMap b_map,
         unsigned short* __restrict__ c, int m, int n, int k) {
  __shared__ alignas(128) unsigned short a_tile[BM * BK];
  __shared__ alignas(128) unsigned short b_tile[BK * BN];
  __shared__ alignas(8) unsigned long long tiles_full;
  const unsigned int bar = smem_addr(&tiles_full);
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
  if (threadIdx.x == 0) {
    mbar_init(bar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();
  float acc[4][4] = {};
  unsigned int phase = 0;
  for (int k0 = 0; k0 < k; k0 += BK) {
    if (threadIdx.x == 0) {
      mbar_expect_tx(bar, (BM * BK + BK * BN) * sizeof(unsigned short));
      tma_load_2d(smem_addr(a_tile), &a_map, k0, row0, bar);
      tma_load_2d(smem_addr(b_tile), &b_map, col0, k0, bar);
    }
    mbar_wait(bar, phase);
    phase ^= 1;
#pragma unroll 8
    for (int kk = 0; kk < BK; ++kk) {
      float av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = elem_to_float(a_tile[(ty * 4 + i) * BK + kk]);
#pragma unroll
      for (int j = 0; j < 4; ++j) bv[j] = elem_to_float(b_tile[kk * BN + tx * 4 + j]);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();  // every thread is done with the tiles before TMA overwrites them
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int r = row0 + ty * 4 + i, cc = col0 + tx * 4 + j;
      c[(long long)r * n + cc] = float_to_elem(acc[i][j]);
    }
}
"""

TMA_TILE = {"bm": 64, "bn": 64, "bk": 32}


def gemm_source(body: str, params: dict[str, Any], variant: int = 0) -> str:
    """Prelude (element type, B layout, conversions) plus ``body``.

    ``variant`` only adds a comment: distinct sources with the same kernel, so a
    benchmark can pay for real compiles.
    """
    defines = (
        f"// variant {variant}\n"
        f"#define ELEM_BF16 {int(params['dtype'] == 'bfloat16')}\n"
        f"#define B_NK {int(params.get('b_layout', 'kn') == 'nk')}\n"
    )
    return defines + _CONVERT + body


def _gemm_tensors(params: dict[str, Any]) -> tuple[TensorArg, ...]:
    """Pointers to a, b and c, as the GEMM's tensor contract has them."""
    return tuple(TensorArg(t.name, t.dtype, t.shape, t.role)
                 for t in workload_tensors("gemm", params))


def _mnk(params: dict[str, Any]) -> tuple[ScalarArg, ScalarArg, ScalarArg]:
    return tuple(ScalarArg(name, "int32", params[name]) for name in ("m", "n", "k"))  # type: ignore[return-value]


def gemm_tiled_artifact(params: dict[str, Any], variant: int = 0) -> KernelArtifact:
    """A correct fp32-accumulating tiled GEMM for fp16 / bf16, any m, n, k and B layout."""
    a, b, c = _gemm_tensors(params)
    return KernelArtifact(
        op="gemm",
        params=dict(params),
        schedule_hash=f"handwritten-gemm-tiled-{variant}",
        source=gemm_source(_TILED_BODY, params, variant),
        entry="gemm_tiled",
        grid=(math.ceil(params["n"] / 64), math.ceil(params["m"] / 64), 1),
        block=(256, 1, 1),
        dynamic_smem_bytes=0,
        args=(a, b, c, *_mnk(params)),
    )


def gemm_tma_artifact(params: dict[str, Any]) -> KernelArtifact:
    """A correct GEMM whose A and B tiles are loaded through TMA tensor maps.

    Needs B as (k, n) ("kn") and m, n, k multiples of the 64 x 64 x 32 tile.
    """
    m, n, k, dtype = params["m"], params["n"], params["k"], params["dtype"]
    if params.get("b_layout", "kn") != "kn" or m % 64 or n % 64 or k % 32:
        raise ValueError("gemm_tma_artifact needs b_layout='kn' and m, n % 64 == 0, k % 32 == 0")
    _, _, c = _gemm_tensors(params)
    elem = 2
    a_map = TensorMapArg(
        name="a_map",
        tensor="a",
        dtype=dtype,
        global_dims=(k, m),
        global_strides_bytes=(k * elem,),
        box_dims=(TMA_TILE["bk"], TMA_TILE["bm"]),
        swizzle="none",
    )
    b_map = TensorMapArg(
        name="b_map",
        tensor="b",
        dtype=dtype,
        global_dims=(n, k),
        global_strides_bytes=(n * elem,),
        box_dims=(TMA_TILE["bn"], TMA_TILE["bk"]),
        swizzle="none",
    )
    return KernelArtifact(
        op="gemm",
        params=dict(params),
        schedule_hash="handwritten-gemm-tma",
        source=gemm_source(_TMA_BODY, params),
        entry="gemm_tma",
        grid=(n // 64, m // 64, 1),
        block=(256, 1, 1),
        dynamic_smem_bytes=0,
        args=(a_map, b_map, c, *_mnk(params)),
    )


# --- stand-ins for CPU tests -------------------------------------------------------------

STANDIN_FINGERPRINT = {
    "name": "stand-in",
    "compute_capability": "9.0",
    "sm_count": 1,
    "total_memory_bytes": 1 << 30,
    "l2_bytes": 1 << 20,
    "driver_version": "0.0",
    "driver_release": "",
    "cuda_runtime_version": "0.0",
    "cupy_version": "",
    "codegen_version": "",
}


def standin_artifact(
    behaviour: str = "ok", latency_us: float = 10.0, name: str = "k"
) -> KernelArtifact:
    """An artifact the stand-in worker understands.

    ``behaviour``: ``ok``; ``hang`` (never answers); ``die`` (the process exits);
    ``crash`` (reports a sticky error and exits, as a real worker does); ``wrong``;
    ``syntax`` (the stand-in compiler rejects it).
    """
    return KernelArtifact(
        op="gemm",
        params={"m": 64, "n": 64, "k": 64, "dtype": "float16", "b_layout": "kn"},
        schedule_hash=name,
        source=f"// stand-in {name} {behaviour}",
        entry=name,
        grid=(1, 1, 1),
        block=(32, 1, 1),
        dynamic_smem_bytes=0,
        args=(),
        extra={"standin": behaviour, "latency_us": latency_us},
    )


class StandinCompiler:
    """Compiles nothing; rejects sources that contain ``syntax``."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def compile_many(
        self, requests: list[tuple[str, tuple[str, ...]]], default_arch: str
    ) -> list[CompileResult]:
        self.batches.append(len(requests))
        return [
            CompileResult(
                ok="syntax" not in source,
                key=str(i),
                cubin_path=None,
                log="stand-in.cu(1): error: expected a ';'" if "syntax" in source else "",
                compile_ms=1.0,
            )
            for i, (source, _) in enumerate(requests)
        ]

    def close(self) -> None:
        return None


def standin_worker_main(conn: Any, visible_device: str, config: dict[str, Any]) -> None:
    """A worker process that follows the protocol and fakes measurements (no GPU)."""
    os.environ["CUDA_VISIBLE_DEVICES"] = visible_device
    conn.send({"type": "ready", "fingerprint": dict(STANDIN_FINGERPRINT)})
    slot = config.get("device_index")
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message["type"] == "stop":
            return
        job = Job.from_dict(message["job"])
        extra = job.artifact.extra if job.artifact is not None else {}
        behaviour = extra.get("standin", "ok")
        if behaviour == "hang":
            time.sleep(3600)
        if behaviour == "die":
            os._exit(1)
        latency = float(extra.get("latency_us", 10.0))
        time.sleep(latency * 1e-6)
        if behaviour == "crash":
            result = Measurement(
                MeasurementStatus.CRASH, error="illegal address (stand-in)", device_index=slot
            )
        elif behaviour == "wrong":
            result = Measurement(
                MeasurementStatus.WRONG_RESULT, rel_error=0.5, error_bound=1e-2, device_index=slot
            )
        else:
            result = Measurement.from_samples(
                [latency] * 3, log=job.label, device_index=slot, rel_error=0.0, error_bound=1e-2
            )
        conn.send({"type": "result", "id": message["id"], "measurement": result.to_dict()})
        if behaviour == "crash":
            os._exit(3)
