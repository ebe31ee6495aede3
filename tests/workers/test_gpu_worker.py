"""The GPU worker on a real device: correct kernels, faults, timing fidelity, references.

Run on an H200 with ``pytest tests/workers -m gpu``; skipped where CuPy sees no GPU.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import naive_refs
import numpy as np
import pytest

from codegen.artifact import KernelArtifact, WorkspaceArg
from workers import (
    Job,
    LocalGpuPool,
    MeasurementStatus,
    ParallelCompiler,
    _dtypes,
    fingerprint_key,
    read_fingerprint,
)
from workers.contract import contract
from workers.inputs import build_inputs
from workers.testing import gemm_source, gemm_tiled_artifact, gemm_tma_artifact
from workers.verify import reference

pytestmark = pytest.mark.gpu

GEMM = {"m": 1024, "n": 1024, "k": 1024, "dtype": "float16", "b_layout": "kn"}
WORKLOAD = {"op": "gemm", "params": GEMM}
S = MeasurementStatus
SIGNATURE = (
    "(const unsigned short* a, const unsigned short* b, unsigned short* c, int m, int n, int k)"
)
# Spins on a volatile read of the NaN-poisoned output, which never holds 0x1234.
HANG_BODY = (
    'extern "C" __global__ void gemm_hang' + SIGNATURE + " {\n"
    "  volatile unsigned short* flag = c;\n"
    "  while (flag[0] != 0x1234) { }\n}\n"
)
# Writes 2 TB past the output: an illegal address, which is sticky.
OOB_BODY = (
    'extern "C" __global__ void gemm_oob' + SIGNATURE + " {\n  c[(long long)1 << 40] = 1;\n}\n"
)

# The tiled GEMM behind a stream-K-style ticket counter in a workspace: a ticket past the
# grid means the counter did not start at zero, and that block leaves its tile unwritten
# (NaN-poisoned: a wrong result); the block that takes the last ticket resets it.
COUNTED_BODY = r"""
extern "C" __global__ void __launch_bounds__(256)
gemm_counted(const unsigned short* __restrict__ a, const unsigned short* __restrict__ b,
             unsigned short* __restrict__ c, unsigned int* tickets, int m, int n, int k) {
  __shared__ unsigned int ticket;
  if (threadIdx.x == 0) ticket = atomicAdd(tickets, 1u);
  __syncthreads();
  const unsigned int blocks = gridDim.x * gridDim.y;
  if (ticket >= blocks) return;
  gemm_tile(a, b, c, m, n, k);
  if (threadIdx.x == 0 && ticket == blocks - 1) atomicExch(tickets, 0u);
}
"""


def _counted_artifact() -> KernelArtifact:
    """The tiled GEMM as a device function called by ``gemm_counted``, with a workspace
    between its tensors and its scalars."""
    tiled = gemm_tiled_artifact(GEMM)
    tile = tiled.source.replace('extern "C" __global__ void __launch_bounds__(256)\ngemm_tiled(',
                                "__device__ __forceinline__ void gemm_tile(")
    assert tile != tiled.source
    a, b, c, *scalars = tiled.args
    return dataclasses.replace(tiled, entry="gemm_counted", source=tile + COUNTED_BODY,
                               args=(a, b, c, WorkspaceArg("tickets", 4 << 20), *scalars))


def _variant(entry: str, body: str, params: dict[str, Any] = GEMM) -> KernelArtifact:
    tiled = gemm_tiled_artifact(params)
    return dataclasses.replace(tiled, entry=entry, source=gemm_source(body, params))


def _job(artifact: KernelArtifact, deadline_s: float = 60.0) -> Job:
    return Job(
        workload={"op": "gemm", "params": artifact.params}, artifact=artifact, deadline_s=deadline_s
    )


@pytest.fixture(scope="module")
def cubin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cubins")


@pytest.fixture(scope="module")
def pool(cubin_dir: Path) -> Iterator[LocalGpuPool]:
    compiler = ParallelCompiler(cache_dir=cubin_dir)
    with LocalGpuPool(compiler=compiler, codegen_version="test") as executor:
        yield executor


def _direct_median_us(artifact: KernelArtifact, samples: int = 50) -> tuple[float, float]:
    """Time ``artifact`` in this process as a user would run it: cupy.RawModule(code=...).

    Same method as the worker (warm-up, 2 x L2 flush, one event pair per launch), but none
    of its code. Returns (median latency in us, relative error vs cupy.matmul).
    """
    import cupy

    m, n, k = (artifact.params[d] for d in "mnk")
    module = cupy.RawModule(
        code=artifact.source, options=tuple(artifact.compile_options), backend="nvrtc"
    )
    kernel = module.get_function(artifact.entry)
    rng = cupy.random.default_rng(123)
    a = (rng.standard_normal((m, k), dtype=cupy.float32) * 0.5).astype(cupy.float16)
    b = (rng.standard_normal((k, n), dtype=cupy.float32) * 0.5).astype(cupy.float16)
    c = cupy.empty((m, n), dtype=cupy.float16)
    args = (a, b, c, np.int32(m), np.int32(n), np.int32(k))
    l2_bytes = cupy.cuda.runtime.getDeviceProperties(0)["l2CacheSize"]
    flush = cupy.empty(max(2 * l2_bytes, 64 << 20), dtype=cupy.uint8)
    for _ in range(10):
        kernel(artifact.grid, artifact.block, args)
    cupy.cuda.Device().synchronize()
    ref = cupy.matmul(a.astype(cupy.float32), b.astype(cupy.float32))
    rel = float(cupy.linalg.norm(c.astype(cupy.float32) - ref) / cupy.linalg.norm(ref))
    begin, end = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(samples):
        flush.fill(0)
        begin.record()
        kernel(artifact.grid, artifact.block, args)
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(begin, end) * 1e3)
    del flush
    cupy.get_default_memory_pool().free_all_blocks()
    return statistics.median(times), rel


def test_tiled_gemm_is_ok_and_matches_direct_event_timing(pool: LocalGpuPool) -> None:
    artifact = gemm_tiled_artifact(GEMM)
    result = pool.measure_one(_job(artifact))
    assert result.status is S.OK, result.error
    assert result.rel_error is not None and result.rel_error < 1e-2
    assert result.registers and result.registers > 0 and result.spill_bytes == 0
    assert result.smem_bytes == 8192 and len(result.samples_us) >= 20
    assert result.compile_ms and result.compile_ms > 0
    direct_us, direct_rel = _direct_median_us(artifact)
    assert direct_rel < 1e-2  # the artifact runs as is through cupy.RawModule(code=...)
    print(f"worker {result.latency_us:.1f} us, direct {direct_us:.1f} us")
    assert abs(result.latency_us - direct_us) / direct_us < 0.10


def test_a_kernel_with_a_workspace_is_verified_and_timed(pool: LocalGpuPool) -> None:
    """The worker allocates the workspace zeroed and passes it in its place; the check and
    the timed launches share it, each leaving it as it found it."""
    result = pool.measure_one(_job(_counted_artifact()))
    assert result.status is S.OK, result.error
    assert result.rel_error is not None and result.rel_error < 1e-2
    assert len(result.samples_us) >= 20


def test_two_measurements_of_one_kernel_agree_within_3_percent(pool: LocalGpuPool) -> None:
    job = _job(gemm_tiled_artifact(GEMM))
    first, second = pool.measure([job, job])
    assert first.status is S.OK and second.status is S.OK
    print(f"{first.latency_us:.2f} us vs {second.latency_us:.2f} us")
    assert (
        abs(first.latency_us - second.latency_us) / min(first.latency_us, second.latency_us) < 0.03
    )


def test_tma_gemm_loads_through_tensor_maps(pool: LocalGpuPool) -> None:
    for dtype in ("float16", "bfloat16"):
        params = {**GEMM, "dtype": dtype}
        result = pool.measure_one(_job(gemm_tma_artifact(params)))
        assert result.status is S.OK, result.error
        assert result.rel_error < _dtypes.REL_ERROR_BOUND[dtype]


def test_bf16_and_nk_layout_and_ragged_shape(pool: LocalGpuPool) -> None:
    params = {"m": 1000, "n": 600, "k": 200, "dtype": "bfloat16", "b_layout": "nk"}
    result = pool.measure_one(_job(gemm_tiled_artifact(params)))
    assert result.status is S.OK, result.error


def test_hang_is_a_timeout_within_its_deadline_then_next_is_ok(pool: LocalGpuPool) -> None:
    start = time.perf_counter()
    hang, after = pool.measure(
        [_job(_variant("gemm_hang", HANG_BODY), deadline_s=5.0), _job(gemm_tiled_artifact(GEMM))]
    )
    assert hang.status is S.TIMEOUT, hang.error
    assert after.status is S.OK, after.error
    print(f"hang + respawn + next: {time.perf_counter() - start:.1f} s")


def test_illegal_address_is_a_crash_then_next_is_ok(pool: LocalGpuPool) -> None:
    crash, after = pool.measure(
        [_job(_variant("gemm_oob", OOB_BODY)), _job(gemm_tiled_artifact(GEMM))]
    )
    assert crash.status is S.CRASH, crash.error
    assert "700" in crash.error or "illegal" in crash.error.lower()
    assert after.status is S.OK, after.error


def test_wrong_result_compile_error_and_launch_error(pool: LocalGpuPool) -> None:
    tiled = gemm_tiled_artifact(GEMM)
    wrong = dataclasses.replace(
        tiled,
        source=tiled.source.replace("float_to_elem(acc[i][j])", "float_to_elem(acc[i][j] * 1.05f)"),
    )
    broken = dataclasses.replace(tiled, source=tiled.source.replace("int m, int n", "int m int n"))
    too_big = dataclasses.replace(tiled, block=(2048, 1, 1))
    results = pool.measure([_job(wrong), _job(broken), _job(too_big), _job(tiled)])
    assert [r.status for r in results] == [S.WRONG_RESULT, S.COMPILE_ERROR, S.LAUNCH_ERROR, S.OK]
    assert results[0].rel_error == pytest.approx(0.05, rel=0.2)
    assert "error" in results[1].log


def test_cublas_baseline(pool: LocalGpuPool) -> None:
    jobs = [
        Job(workload={"op": "gemm", "params": {**GEMM, "dtype": d}}, baseline="cublas")
        for d in ("float16", "bfloat16")
    ]
    if not _torch_available():
        jobs = jobs[:1]
    for result in pool.measure(jobs):
        assert result.status is S.OK, result.error
        assert result.latency_us > 0


@pytest.mark.parametrize("baseline", ["sdpa_cudnn", "sdpa_flash"])
def test_sdpa_baselines(pool: LocalGpuPool, baseline: str) -> None:
    if not _torch_available():
        pytest.skip("PyTorch not importable")
    params = {
        "batch": 1,
        "heads": 8,
        "kv_heads": 2,
        "seq_q": 1024,
        "seq_kv": 1024,
        "head_dim": 128,
        "causal": True,
        "dtype": "float16",
    }
    results = pool.measure(
        [
            Job(workload={"op": "attention", "params": params}, baseline=baseline),
            Job(
                workload={
                    "op": "attention",
                    "params": {**params, "kv_heads": 8, "causal": False, "dtype": "bfloat16"},
                },
                baseline=baseline,
            ),
        ]
    )
    for result in results:
        assert result.status is S.OK, result.error
        print(f"{baseline}: {result.latency_us:.1f} us, rel error {result.rel_error:.2e}")


TINY = {
    "attention": {
        "batch": 1,
        "heads": 4,
        "kv_heads": 2,
        "seq_q": 6,
        "seq_kv": 6,
        "head_dim": 8,
        "causal": True,
        "dtype": "bfloat16",
    },
    "mamba2_chunk_state": {
        "batch": 1,
        "seqlen": 10,
        "nheads": 4,
        "headdim": 3,
        "dstate": 4,
        "ngroups": 2,
        "chunk_size": 4,
        "dtype": "float16",
    },
}
TINY["mamba2_chunk_scan"] = TINY["mamba2_chunk_state"]


@pytest.mark.parametrize("op", sorted(TINY))
def test_gpu_references_match_float64_loops(op: str) -> None:
    import cupy

    params = TINY[op]
    dtypes = {name: spec.default_dtype for name, spec in contract(op, params).items()}
    inputs = build_inputs(cupy, op, params, dtypes, seed=5)
    inputs32 = {n: _dtypes.to_float32(cupy, t, dtypes[n]) for n, t in inputs.items()}
    refs = reference(cupy, op, params, inputs32)
    got = cupy.asnumpy(next(iter(refs.values())))
    f64 = {n: cupy.asnumpy(t).astype(np.float64) for n, t in inputs32.items()}
    if op == "attention":
        want, lse = naive_refs.attention(f64["q"], f64["k"], f64["v"], params["causal"])
        np.testing.assert_allclose(cupy.asnumpy(refs["lse"]), lse, rtol=1e-5, atol=1e-5)
    elif op == "mamba2_chunk_state":
        want = naive_refs.chunk_state(f64["b"], f64["x"], f64["dt"], f64["dA_cumsum"])
    else:
        want = naive_refs.chunk_scan(
            f64["cb"], f64["x"], f64["dt"], f64["dA_cumsum"], f64["c"], f64["states"],
            f64["D"],
        )
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_fingerprint_is_read_live_and_stable(pool: LocalGpuPool) -> None:
    fingerprint = read_fingerprint(0, codegen_version="test")
    assert fingerprint["sm_count"] > 0 and fingerprint["l2_bytes"] > 0
    assert fingerprint["total_memory_bytes"] > 1 << 30
    assert fingerprint["compute_capability"].count(".") == 1
    assert fingerprint_key(read_fingerprint(0, codegen_version="test")) == fingerprint_key(
        fingerprint
    )
    assert pool.fingerprints[0] == fingerprint  # the worker reads the same device
    print(fingerprint)


def _torch_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def test_cubins_are_cached_on_disk(pool: LocalGpuPool, cubin_dir: Path) -> None:
    pool.measure_one(_job(gemm_tiled_artifact(GEMM)))
    assert any(cubin_dir.glob("*.cubin")) and any(cubin_dir.glob("*.json"))
