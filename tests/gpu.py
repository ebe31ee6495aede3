"""Whether this machine can run the ``gpu`` tests: CuPy importable and a CUDA device seen."""

from __future__ import annotations

import functools


@functools.cache
def cuda_device_visible() -> bool:
    """Whether CuPy is importable and sees at least one CUDA device."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False
