"""Catalog of known GPUs, from vendor datasheets unless a comment says otherwise.

Tensor-core rates are dense (no sparsity) flops per cycle per SM; ``clock_mhz`` is the
clock that the datasheet's tensor TFLOP/s implies (989.4 TFLOP/s = 132 SMs x 4096 flops x
1830 MHz for H100 SXM), not the maximum boost clock. Per-sEU rates and latencies are
estimates for the cost model, to be replaced by calibration from measurements.
"""

from __future__ import annotations

from dataclasses import replace

from scheduler_search.hardware.model import HOPPER_CAPABILITIES, SEU, Device, UnitKind

_MIB = 1 << 20

#: sEUs of a Hopper SM. TMA: about 64 B/cycle from L2 per SM (estimate); wgmma: 4096 dense
#: fp16 flops/cycle (datasheet-derived); 128 FP32 lanes; 16 SFU lanes (4 per sub-partition).
_HOPPER_UNITS = (
    SEU(UnitKind.TMA, True, 64.0, 600.0, "cp.async.bulk.tensor"),
    SEU(UnitKind.TENSOR_CORE, True, 4096.0, 120.0, "wgmma.mma_async"),
    SEU(UnitKind.CUDA_CORE, False, 128.0, 4.0, "fma/ld/st"),
    SEU(UnitKind.SFU, False, 16.0, 20.0, "ex2.approx"),
)

#: sEUs of an Ampere SM: cp.async through the LSU (about 64 B/cycle, estimate), sync
#: mma.sync tensor cores at 2048 fp16 flops/cycle, 64 FP32 lanes, 16 SFU lanes.
_AMPERE_UNITS = (
    SEU(UnitKind.LSU, True, 64.0, 500.0, "cp.async"),
    SEU(UnitKind.TENSOR_CORE, False, 2048.0, 32.0, "mma.sync"),
    SEU(UnitKind.CUDA_CORE, False, 64.0, 4.0, "fma/ld/st"),
    SEU(UnitKind.SFU, False, 16.0, 20.0, "ex2.approx"),
)

H100_SXM = Device(
    name="NVIDIA H100 80GB HBM3",
    arch="sm_90a",
    compute_capability=(9, 0),
    sm_count=132,
    smem_per_sm_bytes=228 * 1024,
    smem_per_block_bytes=227 * 1024,
    regs_per_sm=65536,
    regs_per_thread_max=255,
    max_threads_per_block=1024,
    max_threads_per_sm=2048,
    l2_bytes=50 * _MIB,
    clock_mhz=1830.0,
    memory_bytes=81559 * _MIB,
    mem_bandwidth_gbps=3350.0,
    # Estimate: 64 B/cycle/SM x 132 SMs x 1830 MHz.
    l2_bandwidth_gbps=15460.0,
    tensor_flops_per_cycle_per_sm={"float16": 4096.0, "bfloat16": 4096.0,
                                   "float8_e4m3": 8192.0, "float8_e5m2": 8192.0},
    units=_HOPPER_UNITS,
    capabilities=HOPPER_CAPABILITIES,
)

# Same die as H100 SXM with 141 GB of HBM3e at 4.8 TB/s (datasheet). L2: 60 MiB as
# reported by cudaDeviceProp.l2CacheSize on the lent H200 (measured here, 2026-10-28).
# Clusters of 4 one-SM blocks: 30 at once (2026-12-02: a persistent clustered chunk state
# ran in 168 us with 120 blocks, 269-285 us with 124-132, a second wave of clusters); 66
# pairs fit. How SMs group into GPCs can differ from board to board: a figure of the lent
# board, not of every H200.
H200 = replace(
    H100_SXM,
    name="NVIDIA H200",
    l2_bytes=60 * _MIB,
    memory_bytes=143771 * _MIB,
    mem_bandwidth_gbps=4800.0,
    resident_clusters={4: 30},
)

A100_SXM = Device(
    name="NVIDIA A100-SXM4-80GB",
    arch="sm_80",
    compute_capability=(8, 0),
    sm_count=108,
    smem_per_sm_bytes=164 * 1024,
    smem_per_block_bytes=163 * 1024,
    regs_per_sm=65536,
    regs_per_thread_max=255,
    max_threads_per_block=1024,
    max_threads_per_sm=2048,
    l2_bytes=40 * _MIB,
    clock_mhz=1410.0,
    memory_bytes=81920 * _MIB,
    mem_bandwidth_gbps=2039.0,
    # Estimate: 64 B/cycle/SM x 108 SMs x 1410 MHz.
    l2_bandwidth_gbps=9745.0,
    tensor_flops_per_cycle_per_sm={"float16": 2048.0, "bfloat16": 2048.0},
    units=_AMPERE_UNITS,
)

#: Short names accepted by the CLI and the API (``sim:<name>``).
CATALOG: dict[str, Device] = {"h100": H100_SXM, "h200": H200, "a100": A100_SXM}


def get_device(name: str) -> Device:
    """Catalog device by short name (``h200``, ``sim:h200``); ``KeyError`` lists the choices."""
    key = name.lower().removeprefix("sim:")
    if key not in CATALOG:
        raise KeyError(f"unknown device {name!r}; known: {', '.join(sorted(CATALOG))}")
    return CATALOG[key]
