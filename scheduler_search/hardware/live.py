"""A Device built from live CUDA device properties.

The properties come from the caller (``workers`` reads them with CuPy's
``cupy.cuda.runtime.getDeviceProperties``), so this module stays free of GPU imports.
The catalog entry of the same family supplies what the properties do not tell (tensor
rates, sEU rates); the live figures override the limits they do tell.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from scheduler_search.hardware.catalog import A10, A40, A100_SXM, H100_SXM, H200, L40S, RTX_4090
from scheduler_search.hardware.model import Capabilities, Device


def _family(name: str, major: int, minor: int) -> Device:
    """The catalog entry whose figures a live device of ``name`` and compute capability
    ``major.minor`` starts from. Past Hopper (10 and up) the H100's figures stand in,
    without its capabilities: code built for sm_90a does not run there."""
    if major == 9:
        return H200 if "H200" in name else H100_SXM
    if major > 9:
        return replace(H100_SXM, capabilities=Capabilities())
    if (major, minor) == (8, 9):
        return RTX_4090 if "RTX" in name else L40S
    if major == 8 and minor > 0:
        return A40 if "A40" in name else A10
    return A100_SXM


def device_from_properties(
    props: Mapping[str, Any], software: Mapping[str, str] | None = None
) -> Device:
    """Device from a ``cudaDeviceProp``-like mapping (CuPy's key names).

    Args:
        props: keys ``name``, ``major``, ``minor``, ``multiProcessorCount``,
            ``sharedMemPerMultiprocessor``, ``sharedMemPerBlockOptin``,
            ``regsPerMultiprocessor``, ``maxThreadsPerBlock``,
            ``maxThreadsPerMultiProcessor``, ``l2CacheSize``, ``clockRate`` (kHz),
            ``totalGlobalMem``, ``memoryClockRate`` (kHz), ``memoryBusWidth`` (bits).
        software: versions that belong in the fingerprint (driver, runtime, CuPy, codegen).
    """
    raw_name = props["name"]
    name = raw_name.decode() if isinstance(raw_name, bytes) else str(raw_name)
    major, minor = int(props["major"]), int(props["minor"])
    base = _family(name, major, minor)
    # DDR: two transfers per memory clock; bus width in bits.
    bandwidth_gbps = 2 * props["memoryClockRate"] * 1e3 * props["memoryBusWidth"] / 8 / 1e9
    return replace(
        base,
        name=name,
        arch=f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}",
        compute_capability=(major, minor),
        sm_count=int(props["multiProcessorCount"]),
        smem_per_sm_bytes=int(props["sharedMemPerMultiprocessor"]),
        smem_per_block_bytes=int(props["sharedMemPerBlockOptin"]),
        regs_per_sm=int(props["regsPerMultiprocessor"]),
        max_threads_per_block=int(props["maxThreadsPerBlock"]),
        max_threads_per_sm=int(props["maxThreadsPerMultiProcessor"]),
        l2_bytes=int(props["l2CacheSize"]),
        memory_bytes=int(props["totalGlobalMem"]),
        mem_bandwidth_gbps=bandwidth_gbps or base.mem_bandwidth_gbps,
        source="live",
        software=dict(software or {}),
    )
