"""Host-side TMA descriptors: a TensorMapArg plus a device pointer -> kernel argument bytes
(and, for a target without TMA, pipetune's copy map of the same 128 bytes: :func:`encoder_for`).

The descriptor is encoded by ``cuTensorMapEncodeTiled`` (CUDA driver API, through
``cuda.bindings``) and passed to the kernel *by value* as a ``const __grid_constant__
CUtensorMap``: 128 opaque bytes, 64-byte aligned in the kernel's parameter space. CuPy
passes a size-one NumPy array by value (it hands the driver a pointer to the array's
data, and ``cuLaunchKernel`` copies as many bytes as the parameter has), so the bytes are
wrapped in a one-element ``V128`` array.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from codegen.artifact import TENSOR_MAP_DATA_TYPES, TENSOR_MAP_OOB_FILLS, TENSOR_MAP_SWIZZLES
from workers import _dtypes

TENSOR_MAP_BYTES = 128
TENSOR_MAP_ALIGN_BYTES = 64
# cuTensorMapEncodeTiled limits (CUDA driver API reference, "Tensor Map Object Management").
MAX_RANK = 5
MAX_BOX_DIM = 256
GLOBAL_ADDRESS_ALIGN_BYTES = 16



def check_tensor_map(arg: Any) -> None:
    """Reject a TensorMapArg that ``cuTensorMapEncodeTiled`` would refuse, with a reason."""
    rank = len(arg.global_dims)
    if not 1 <= rank <= MAX_RANK:
        raise ValueError(f"tensor map {arg.name!r}: rank {rank} not in 1..{MAX_RANK}")
    if len(arg.global_strides_bytes) != rank - 1:
        raise ValueError(f"tensor map {arg.name!r}: needs {rank - 1} global strides")
    if len(arg.box_dims) != rank:
        raise ValueError(f"tensor map {arg.name!r}: needs {rank} box dims")
    if any(not 1 <= b <= MAX_BOX_DIM for b in arg.box_dims):
        raise ValueError(f"tensor map {arg.name!r}: box dims must be in 1..{MAX_BOX_DIM}")
    if any(s % 16 for s in arg.global_strides_bytes):
        raise ValueError(f"tensor map {arg.name!r}: global strides must be multiples of 16 B")
    if arg.dtype not in TENSOR_MAP_DATA_TYPES:
        raise ValueError(f"tensor map {arg.name!r}: unsupported dtype {arg.dtype}")
    if arg.element_strides is not None and len(arg.element_strides) != rank:
        raise ValueError(f"tensor map {arg.name!r}: needs {rank} element strides")
    inner_box_bytes = arg.box_dims[0] * _dtypes.itemsize(arg.dtype)
    if inner_box_bytes % 16:
        raise ValueError(f"tensor map {arg.name!r}: inner box must be a multiple of 16 B")
    swizzle_span = {"none": None, "32B": 32, "64B": 64, "128B": 128}[arg.swizzle]
    if swizzle_span is not None and inner_box_bytes > swizzle_span:
        raise ValueError(
            f"tensor map {arg.name!r}: inner box of {inner_box_bytes} B exceeds the "
            f"{arg.swizzle} swizzle span"
        )


def encode_tensor_map(arg: Any, device_ptr: int) -> np.ndarray:
    """Encode ``arg`` over the tensor at ``device_ptr``; returns a one-element V128 array."""
    from cuda.bindings import driver

    check_tensor_map(arg)
    if device_ptr % GLOBAL_ADDRESS_ALIGN_BYTES:
        raise ValueError(f"tensor map {arg.name!r}: global address not 16-byte aligned")
    (err,) = driver.cuInit(0)
    _check(driver, err, "cuInit")
    rank = len(arg.global_dims)
    element_strides = arg.element_strides or (1,) * rank
    err, tensor_map = driver.cuTensorMapEncodeTiled(
        getattr(driver.CUtensorMapDataType, TENSOR_MAP_DATA_TYPES[arg.dtype]),
        rank,
        device_ptr,
        [driver.cuuint64_t(int(d)) for d in arg.global_dims],
        [driver.cuuint64_t(int(s)) for s in arg.global_strides_bytes],
        [driver.cuuint32_t(int(b)) for b in arg.box_dims],
        [driver.cuuint32_t(int(e)) for e in element_strides],
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(driver.CUtensorMapSwizzle, TENSOR_MAP_SWIZZLES[arg.swizzle]),
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        getattr(driver.CUtensorMapFloatOOBfill, TENSOR_MAP_OOB_FILLS[arg.oob_fill]),
    )
    _check(driver, err, f"cuTensorMapEncodeTiled({arg.name})")
    return tensor_map_argument(ctypes.string_at(tensor_map.getPtr(), TENSOR_MAP_BYTES))


def encode_copy_map(arg: Any, device_ptr: int) -> np.ndarray:
    """``arg`` over the tensor at ``device_ptr`` as pipetune's copy map (a target without
    TMA, whose loading threads copy the boxes): the fields of
    :data:`codegen.targets.ampere.copies.COPY_MAP_FIELDS`, packed little-endian."""
    from codegen.targets.ampere.copies import COPY_MAP_BYTES, COPY_MAP_FIELDS, COPY_MAP_RANK

    check_tensor_map(arg)
    rank = len(arg.global_dims)
    if rank > COPY_MAP_RANK:
        raise ValueError(f"copy map {arg.name!r}: rank {rank} > {COPY_MAP_RANK}")
    if any(e != 1 for e in arg.element_strides or ()):
        raise ValueError(f"copy map {arg.name!r}: element strides are TMA's alone")
    if device_ptr % GLOBAL_ADDRESS_ALIGN_BYTES:
        raise ValueError(f"copy map {arg.name!r}: global address not 16-byte aligned")
    elem_bytes = _dtypes.itemsize(arg.dtype)
    row_chunks = arg.box_dims[0] * elem_bytes // 16
    if row_chunks & (row_chunks - 1):
        raise ValueError(f"copy map {arg.name!r}: a box row of {row_chunks} 16-byte chunks "
                         "(the copies need a power of two)")
    pad = COPY_MAP_RANK + 1 - rank
    values = {
        "base": (device_ptr,),
        "strides": (*arg.global_strides_bytes, *(0,) * (COPY_MAP_RANK - rank + 1)),
        "dims": (*arg.global_dims, *(1,) * pad),
        "box": (*arg.box_dims, *(1,) * pad),
        "elem_shift": (elem_bytes.bit_length() - 1,),
        "swizzle_bytes": (0 if arg.swizzle == "none" else int(arg.swizzle.removesuffix("B")),),
        "rank": (rank,),
        "row_shift": (row_chunks.bit_length() - 1,),
    }
    layout = "<" + "".join(f"{count}{'Q' if ctype == 'u64' else 'I'}"
                           for _, ctype, count in COPY_MAP_FIELDS)
    packed = struct.pack(layout, *(v for name, _, _ in COPY_MAP_FIELDS for v in values[name]))
    return tensor_map_argument(packed.ljust(COPY_MAP_BYTES, b"\0"))


def encoder_for(artifact: Any) -> Callable[[Any, int], np.ndarray]:
    """How the tensor maps of ``artifact``'s kernel are encoded: TMA descriptors, or copy
    maps where the target its code was generated for has no TMA."""
    from codegen.targets import target_of_kernel

    target = target_of_kernel(artifact.compile_options, artifact.extra)
    return encode_tensor_map if target.tensor_map_encoding == "tma" else encode_copy_map


def tensor_map_argument(raw: bytes) -> np.ndarray:
    """Wrap 128 descriptor bytes as the by-value kernel argument CuPy accepts."""
    if len(raw) != TENSOR_MAP_BYTES:
        raise ValueError(f"a CUtensorMap is {TENSOR_MAP_BYTES} bytes, got {len(raw)}")
    return np.frombuffer(raw, dtype=np.dtype((np.void, TENSOR_MAP_BYTES))).copy()


def _check(driver: Any, err: Any, what: str) -> None:
    if err != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(err)
        raise RuntimeError(f"{what} failed: {name.decode() if name else err}")
