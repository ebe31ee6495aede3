"""Element types by name, written against an array module ``xp`` (NumPy or CuPy).

bfloat16 is stored as ``uint16`` bit patterns: neither NumPy nor every CuPy release has a
native bfloat16, and kernels only see the bytes. Conversions round to nearest even. The
8-bit floats (``float8_e4m3``: OCP E4M3, no infinities, 0x7f NaN, as PyTorch's
``float8_e4m3fn``; ``float8_e5m2``: IEEE-like E5M2) are stored as ``uint8`` bytes, widened
through a table of all 256 values and rounded to the nearest finite value (ties to the
even code; out of range saturates).
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

from scheduler_search.ops import DTYPE_BYTES

# Relative L2 error bound ‖out − ref‖ / ‖ref‖ per element type, for an fp32-accumulating
# kernel checked against an fp32 reference computed from the same (rounded) inputs. The
# reference takes 8-bit inputs exactly too, so they add no error of their own: what is
# left is the accumulation order's and the (16-bit) output's rounding.
# Integer inputs (Mamba2's seq_idx) are exact: they loosen no bound.
REL_ERROR_BOUND = {"float16": 1e-2, "bfloat16": 2e-2, "float32": 1e-3,
                   "float8_e4m3": 1e-2, "float8_e5m2": 1e-2, "int32": 0.0}

_STORAGE = {"float16": "float16", "bfloat16": "uint16", "float32": "float32",
            "float8_e4m3": "uint8", "float8_e5m2": "uint8", "int32": "int32"}
_BF16_QUIET_NAN = 0x7FC0
#: (exponent bits, mantissa bits, exponent bias, codes whose exponent is all ones are
#: finite) of each 8-bit float.
_FP8_FORMATS = {"float8_e4m3": (4, 3, 7, True), "float8_e5m2": (5, 2, 15, False)}
_FP8_NAN = 0x7F


@cache
def _fp8_values(dtype: str) -> tuple[float, ...]:
    """The value of every code 0..255 of an 8-bit float (NaN for NaNs, inf kept)."""
    exp_bits, man_bits, bias, top_finite = _FP8_FORMATS[dtype]
    values = []
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        exponent = (code >> man_bits) & ((1 << exp_bits) - 1)
        mantissa = code & ((1 << man_bits) - 1)
        if exponent == (1 << exp_bits) - 1 and not top_finite:
            values.append(sign * math.inf if mantissa == 0 else math.nan)
        elif top_finite and exponent == (1 << exp_bits) - 1 and mantissa == (1 << man_bits) - 1:
            values.append(math.nan)
        elif exponent == 0:
            values.append(sign * mantissa / (1 << man_bits) * 2.0 ** (1 - bias))
        else:
            values.append(sign * (1 + mantissa / (1 << man_bits)) * 2.0 ** (exponent - bias))
    return tuple(values)


def storage_dtype(xp: Any, dtype: str) -> Any:
    """The array dtype that holds elements of ``dtype`` (bfloat16 -> uint16)."""
    try:
        return xp.dtype(_STORAGE[dtype])
    except KeyError:
        raise ValueError(f"unsupported element type {dtype!r}") from None


def itemsize(dtype: str) -> int:
    return DTYPE_BYTES[dtype]


def to_float32(xp: Any, array: Any, dtype: str) -> Any:
    """Widen stored elements of ``dtype`` to float32."""
    if dtype == "bfloat16":
        return (array.astype(xp.uint32) << 16).view(xp.float32)
    if dtype in _FP8_FORMATS:
        return xp.asarray(_fp8_values(dtype), dtype=xp.float32)[array.astype(xp.int32)]
    return array.astype(xp.float32)


def _to_fp8(xp: Any, array: Any, dtype: str) -> Any:
    """The nearest finite code of each value (ties to the even code; saturating)."""
    values = _fp8_values(dtype)
    finite = sorted((v, c) for c, v in enumerate(values) if math.isfinite(v) and
                    not (v == 0.0 and c & 0x80))  # +0 only
    table = xp.asarray([v for v, _ in finite], dtype=xp.float32)
    codes = xp.asarray([c for _, c in finite], dtype=xp.int32)
    x = xp.clip(xp.asarray(array, dtype=xp.float32), table[0], table[-1])
    hi = xp.clip(xp.searchsorted(table, x), 1, len(finite) - 1)
    lo = hi - 1
    below, above = x - table[lo], table[hi] - x
    pick_hi = (above < below) | ((above == below) & (codes[hi] % 2 == 0))
    return xp.where(pick_hi, codes[hi], codes[lo]).astype(xp.uint8)


def from_float32(xp: Any, array: Any, dtype: str) -> Any:
    """Round float32 values to ``dtype`` storage (round to nearest even for bfloat16)."""
    if dtype in _FP8_FORMATS:
        return _to_fp8(xp, array, dtype)
    if dtype == "bfloat16":
        bits = xp.ascontiguousarray(array, dtype=xp.float32).view(xp.uint32)
        rounding = ((bits >> 16) & 1) + xp.uint32(0x7FFF)
        return ((bits + rounding) >> 16).astype(xp.uint16)
    return array.astype(storage_dtype(xp, dtype))


def fill_nan(array: Any, dtype: str) -> None:
    """Poison an output so that unwritten elements fail the check."""
    if dtype == "bfloat16":
        array.fill(_BF16_QUIET_NAN)
    elif dtype in _FP8_FORMATS:
        array.fill(_FP8_NAN)
    else:
        array.fill(float("nan"))
