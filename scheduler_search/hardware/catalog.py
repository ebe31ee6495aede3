"""Catalog of known GPUs, from vendor datasheets unless a comment says otherwise.

Tensor-core rates are dense (no sparsity) flops per cycle per SM; ``clock_mhz`` is the
clock that the datasheet's tensor TFLOP/s implies (989.4 TFLOP/s = 132 SMs x 4096 flops x
1830 MHz for H100 SXM), not the maximum boost clock. Per-sEU rates and latencies are
estimates for the cost model, to be replaced by calibration from measurements.
"""

from __future__ import annotations

from dataclasses import replace

from scheduler_search.hardware.model import (
    ADA_CAPABILITIES,
    AMPERE_CAPABILITIES,
    HOPPER_CAPABILITIES,
    SEU,
    Device,
    UnitKind,
)

_MIB = 1 << 20

#: sEUs of a Hopper SM. TMA: about 64 B/cycle from L2 per SM (estimate); wgmma: 4096 dense
#: fp16 flops/cycle (datasheet-derived); 128 FP32 lanes; 16 SFU lanes (4 per sub-partition).
_HOPPER_UNITS = (
    SEU(UnitKind.TMA, True, 64.0, 600.0, "cp.async.bulk.tensor"),
    SEU(UnitKind.TENSOR_CORE, True, 4096.0, 120.0, "wgmma.mma_async"),
    SEU(UnitKind.CUDA_CORE, False, 128.0, 4.0, "fma/ld/st"),
    SEU(UnitKind.SFU, False, 16.0, 20.0, "ex2.approx"),
)



def _ampere_class_units(tensor_flops: float, fp32_lanes: float) -> tuple[SEU, ...]:
    """sEUs of an Ampere-class SM (sm_80, sm_86, sm_89): cp.async through the LSU (about
    64 B/cycle, estimate), synchronous mma.sync tensor cores at ``tensor_flops`` 16-bit
    flops/cycle (fp32 accumulation) fed by ldmatrix from shared memory's 128 B/cycle
    (datasheet), ``fp32_lanes`` FP32 lanes, 16 SFU lanes."""
    return (
        SEU(UnitKind.LSU, True, 64.0, 500.0, "cp.async"),
        SEU(UnitKind.TENSOR_CORE, False, tensor_flops, 32.0, "mma.sync",
            operand_bytes_per_cycle=128.0),
        SEU(UnitKind.CUDA_CORE, False, fp32_lanes, 4.0, "fma/ld/st"),
        SEU(UnitKind.SFU, False, 16.0, 20.0, "ex2.approx"),
    )


#: A100: 2048 fp16 flops/cycle, 64 FP32 lanes.
_AMPERE_UNITS = _ampere_class_units(2048.0, 64.0)

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
    capabilities=AMPERE_CAPABILITIES,
)


def _ada_ampere_part(name: str, arch: str, sm_count: int, clock_mhz: float, l2_mib: int,
                     memory_gib: int, mem_bandwidth_gbps: float, tensor_flops: float) -> Device:
    """An sm_86 or sm_89 part from its datasheet's peak figures (not calibrated on the part):
    100 KB of shared memory an SM (99 KB a block), 1536 threads, 128 FP32 lanes;
    ``tensor_flops`` dense 16-bit flops a cycle with fp32 accumulation (twice that for FP8
    on sm_89); ``clock_mhz`` the one the datasheet's tensor TFLOP/s implies (as for H100);
    the L2 bandwidth an estimate of 64 B/cycle an SM."""
    rates = {"float16": tensor_flops, "bfloat16": tensor_flops}
    if arch == "sm_89":
        rates |= {"float8_e4m3": 2 * tensor_flops, "float8_e5m2": 2 * tensor_flops}
    return replace(
        A100_SXM,
        name=name,
        arch=arch,
        compute_capability=(8, int(arch[-1])),
        sm_count=sm_count,
        smem_per_sm_bytes=100 * 1024,
        smem_per_block_bytes=99 * 1024,
        max_threads_per_sm=1536,
        l2_bytes=l2_mib * _MIB,
        clock_mhz=clock_mhz,
        memory_bytes=memory_gib * 1024 * _MIB,
        mem_bandwidth_gbps=mem_bandwidth_gbps,
        l2_bandwidth_gbps=round(64 * sm_count * clock_mhz / 1e3),
        tensor_flops_per_cycle_per_sm=rates,
        units=_ampere_class_units(tensor_flops, 128.0),
        capabilities=ADA_CAPABILITIES if arch == "sm_89" else AMPERE_CAPABILITIES,
    )


# 125 TFLOP/s dense fp16 = 72 SMs x 1024 flops x 1695 MHz; 24 GB GDDR6 at 600 GB/s.
A10 = _ada_ampere_part("NVIDIA A10", "sm_86", 72, 1695.0, 6, 24, 600.0, 1024.0)
# 149.7 TFLOP/s = 84 SMs x 1024 flops x 1740 MHz; 48 GB GDDR6 at 696 GB/s.
A40 = _ada_ampere_part("NVIDIA A40", "sm_86", 84, 1740.0, 6, 48, 696.0, 1024.0)
# 362 TFLOP/s = 142 SMs x 1024 flops x 2490 MHz (its 733 FP8 implies 2520 MHz at 2048
# flops); 96 MB of L2; 48 GB GDDR6 at 864 GB/s.
L40S = _ada_ampere_part("NVIDIA L40S", "sm_89", 142, 2490.0, 96, 48, 864.0, 1024.0)
# A GeForce part: fp32 accumulation at half the fp16-accumulation rate, 165 TFLOP/s dense
# (330 FP8) = 128 SMs x 512 flops x 2520 MHz; 72 MB of L2; 24 GB GDDR6X at 1008 GB/s.
RTX_4090 = _ada_ampere_part("NVIDIA GeForce RTX 4090", "sm_89", 128, 2520.0, 72, 24, 1008.0,
                            512.0)

#: The older architectures code can be generated for on a newer GPU, each with the catalog
#: part whose limits and sEUs such code is planned for.
CODE_ARCHS: dict[str, Device] = {"sm_80": A100_SXM, "sm_86": A10, "sm_89": L40S}


def running_code_of(device: Device, arch: str) -> Device:
    """``device`` running code generated for the older architecture ``arch`` (sm_80 code on
    an H200, as the lent GPU measures Ampere-class kernels): the GPU's own SMs, clocks,
    memory and compute capability, the architecture's capabilities, sEUs, tensor rates
    and shared memory (the least of the two), under a name that says so.

    Raises:
        ValueError: ``arch`` is not one of :data:`CODE_ARCHS`, or newer than the GPU.
    """
    if arch not in CODE_ARCHS:
        raise ValueError(f"no code generation for {arch} on another GPU; one of "
                         f"{', '.join(CODE_ARCHS)}")
    part = CODE_ARCHS[arch]
    if device.compute_capability < part.compute_capability:
        major, minor = device.compute_capability
        raise ValueError(f"{device.name} (compute capability {major}.{minor}) cannot run "
                         f"{arch} code")
    return replace(
        device,
        name=f"{device.name} running {arch} code",
        arch=arch,
        smem_per_sm_bytes=min(device.smem_per_sm_bytes, part.smem_per_sm_bytes),
        smem_per_block_bytes=min(device.smem_per_block_bytes, part.smem_per_block_bytes),
        tensor_flops_per_cycle_per_sm=dict(part.tensor_flops_per_cycle_per_sm),
        units=part.units,
        capabilities=part.capabilities,
        resident_clusters={},
    )


#: Short names accepted by the CLI and the API (``sim:<name>``).
CATALOG: dict[str, Device] = {"h100": H100_SXM, "h200": H200, "a100": A100_SXM, "a10": A10,
                              "a40": A40, "l40s": L40S, "rtx4090": RTX_4090}


def get_device(name: str) -> Device:
    """Catalog device by short name (``h200``, ``sim:h200``), or one running an older
    architecture's code (``h200@sm_80``: :func:`running_code_of`); ``KeyError`` lists the
    choices."""
    key, _, arch = name.lower().removeprefix("sim:").partition("@")
    if key not in CATALOG:
        raise KeyError(f"unknown device {name!r}; known: {', '.join(sorted(CATALOG))}")
    if arch:
        try:
            return running_code_of(CATALOG[key], arch)
        except ValueError as error:
            raise KeyError(f"unknown device {name!r}: {error}") from None
    return CATALOG[key]
