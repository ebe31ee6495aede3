"""Element types by name, written against an array module ``xp`` (NumPy or CuPy).

bfloat16 is stored as ``uint16`` bit patterns: neither NumPy nor every CuPy release has a
native bfloat16, and kernels only see the bytes. Conversions round to nearest even.
"""

from __future__ import annotations

from typing import Any

# Relative L2 error bound ‖out − ref‖ / ‖ref‖ per element type, for an fp32-accumulating
# kernel checked against an fp32 reference computed from the same (rounded) inputs.
REL_ERROR_BOUND = {"float16": 1e-2, "bfloat16": 2e-2, "float32": 1e-3}

_STORAGE = {"float16": "float16", "bfloat16": "uint16", "float32": "float32"}
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4}
_BF16_QUIET_NAN = 0x7FC0


def storage_dtype(xp: Any, dtype: str) -> Any:
    """The array dtype that holds elements of ``dtype`` (bfloat16 -> uint16)."""
    try:
        return xp.dtype(_STORAGE[dtype])
    except KeyError:
        raise ValueError(f"unsupported element type {dtype!r}") from None


def itemsize(dtype: str) -> int:
    return _ITEMSIZE[dtype]


def to_float32(xp: Any, array: Any, dtype: str) -> Any:
    """Widen stored elements of ``dtype`` to float32."""
    if dtype == "bfloat16":
        return (array.astype(xp.uint32) << 16).view(xp.float32)
    return array.astype(xp.float32)


def from_float32(xp: Any, array: Any, dtype: str) -> Any:
    """Round float32 values to ``dtype`` storage (round to nearest even for bfloat16)."""
    if dtype == "bfloat16":
        bits = xp.ascontiguousarray(array, dtype=xp.float32).view(xp.uint32)
        rounding = ((bits >> 16) & 1) + xp.uint32(0x7FFF)
        return ((bits + rounding) >> 16).astype(xp.uint16)
    return array.astype(storage_dtype(xp, dtype))


def fill_nan(array: Any, dtype: str) -> None:
    """Poison an output so that unwritten elements fail the check."""
    if dtype == "bfloat16":
        array.fill(_BF16_QUIET_NAN)
    else:
        array.fill(float("nan"))
