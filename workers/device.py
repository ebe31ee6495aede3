"""The device fingerprint: what identifies a GPU for the schedule cache.

Two machines with the same fingerprint get the same tuned kernels; any change that can
move the optimum (another chip, SM count, L2, driver, CUDA runtime, CuPy, or pipetune's
code generation) changes the key.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from scheduler_search.canonical import canonical_sha256

_DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")


def read_fingerprint(device_index: int = 0, codegen_version: str = "") -> dict[str, Any]:
    """Read the fingerprint of CUDA device ``device_index`` (as CuPy numbers it) live."""
    import cupy
    from cupy.cuda import runtime

    props = runtime.getDeviceProperties(device_index)
    name = props["name"]
    return {
        "name": name.decode() if isinstance(name, bytes) else str(name),
        "compute_capability": f"{props['major']}.{props['minor']}",
        "sm_count": int(props["multiProcessorCount"]),
        "total_memory_bytes": int(props["totalGlobalMem"]),
        "l2_bytes": int(props["l2CacheSize"]),
        "driver_version": _cuda_version(runtime.driverGetVersion()),
        "driver_release": _driver_release(),
        "cuda_runtime_version": _cuda_version(runtime.runtimeGetVersion()),
        "cupy_version": cupy.__version__,
        "codegen_version": codegen_version,
    }


def fingerprint_key(fingerprint: dict[str, Any]) -> str:
    """sha256 of the fingerprint's canonical JSON (sorted keys, no whitespace)."""
    return canonical_sha256(fingerprint)


def arch_of(fingerprint: dict[str, Any]) -> str:
    """The NVRTC architecture number of a fingerprint ("9.0" -> "90")."""
    return fingerprint["compute_capability"].replace(".", "")


def _cuda_version(encoded: int) -> str:
    """CUDA encodes versions as 1000 * major + 10 * minor (13000 -> "13.0")."""
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"


def _driver_release() -> str:
    """The kernel driver release (e.g. "580.159.04"), or "" where Linux's /proc lacks it."""
    try:
        text = _DRIVER_VERSION_FILE.read_text()
    except OSError:
        return ""
    match = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+(?:\.\d+)+)", text)
    return match.group(1) if match else ""
