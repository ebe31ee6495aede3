"""Kernel launches through the CUDA driver's ``cuLaunchKernel``, arguments packed once.

Why not CuPy's ``RawKernel.__call__``: it converts and packs every argument on every call,
which cost a tuned GEMM's callable 36-44 µs of host time per call on an H200 (CuPy 14.2),
against 14-17 µs for ``torch.matmul``. Here a call's arguments are laid out once in C
memory (:class:`PackedArguments`, kept per argument signature by the loaded kernel) and a
launch is one foreign call into ``libcuda`` with the ready ``kernelParams`` array.

The driver library is opened with ``ctypes`` (it is the library every CUDA process has
loaded already); nothing here synchronises, allocates or queries a stream, so a launch on a
capturing stream is captured into the graph (CUDA driver API, "Graph Management").

:func:`pack_arguments` lays out an artifact's arguments for both launchers: the worker,
which launches the values through CuPy, and ``load``'s kernels, which launch the packed C
memory through the driver.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from codegen.artifact import KernelArg, ScalarArg, TensorArg, TensorMapArg, WorkspaceArg

#: ``CUresult`` of a call that succeeded (CUDA driver API, "Error Handling").
_CUDA_SUCCESS = 0

#: numpy scalar type -> ctypes type of the kernel parameter it fills.
_C_SCALARS: dict[type, type] = {
    np.uint64: ctypes.c_uint64,
    np.int64: ctypes.c_int64,
    np.uint32: ctypes.c_uint32,
    np.int32: ctypes.c_int32,
    np.float32: ctypes.c_float,
    np.float64: ctypes.c_double,
}


class DriverLaunchError(RuntimeError):
    """``cuLaunchKernel`` refused a launch whose arguments had passed the checks."""


@functools.cache
def _driver() -> ctypes.CDLL:
    name = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
    lib = ctypes.CDLL(name)
    lib.cuLaunchKernel.argtypes = [ctypes.c_void_p, *([ctypes.c_uint] * 7), ctypes.c_void_p,
                                   ctypes.c_void_p, ctypes.c_void_p]
    lib.cuLaunchKernel.restype = ctypes.c_int
    lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    lib.cuGetErrorName.restype = ctypes.c_int
    return lib


def _c_value(value: Any) -> Any:
    """One kernel parameter as a ctypes object holding its bytes."""
    if isinstance(value, np.ndarray):  # an encoded TMA descriptor (CUtensorMap, 128 bytes)
        return (ctypes.c_ubyte * value.nbytes).from_buffer_copy(value.tobytes())
    c_type = _C_SCALARS.get(type(value))
    if c_type is None:
        raise TypeError(f"no kernel parameter type for {type(value).__name__}")
    return c_type(value.item())


class PackedArguments:
    """A kernel's parameters laid out in C memory, and the ``void**`` array that
    ``cuLaunchKernel`` reads them through (its ``kernelParams``).

    The values are numpy scalars (pointers as ``np.uint64``, scalars in their dtype) and
    ``uint8``/``uint64`` arrays for TMA descriptors, in the kernel's parameter order.
    """

    def __init__(self, values: Sequence[Any]) -> None:
        self.values = tuple(values)
        self._c_values = [_c_value(v) for v in self.values]  # kept alive with the array
        self._pointers = (ctypes.c_void_p * max(1, len(self._c_values)))(
            *[ctypes.addressof(v) for v in self._c_values])
        #: The address of the ``void*`` array, as ``cuLaunchKernel`` takes it.
        self.address = ctypes.addressof(self._pointers)


def pack_arguments(
    args: Sequence[KernelArg],
    pointers: Mapping[str, int],
    tensor_map: Callable[[TensorMapArg, int], np.ndarray],
) -> PackedArguments:
    """A kernel's parameters in the artifact's argument order: each tensor and each
    workspace as its device pointer (``np.uint64``, from ``pointers`` by name: the caller
    allocates workspaces), each scalar in its dtype, each TMA descriptor encoded by
    ``tensor_map`` over its tensor's pointer.

    Raises:
        TypeError: an argument of no known kind (rather than a misread parameter).
    """
    values: list[Any] = []
    for arg in args:
        if isinstance(arg, TensorArg | WorkspaceArg):
            values.append(np.uint64(pointers[arg.name]))
        elif isinstance(arg, ScalarArg):
            values.append(np.dtype(arg.dtype).type(arg.value))
        elif isinstance(arg, TensorMapArg):
            values.append(tensor_map(arg, pointers[arg.tensor]))
        else:
            raise TypeError(f"no kernel parameter for argument {arg!r}")
    return PackedArguments(values)


class DriverLaunch:
    """One kernel's launch with its packed parameters: the foreign call's arguments
    (function, grid, block, shared memory, ``kernelParams``) built once as C values, so a
    launch converts only the stream."""

    def __init__(self, function: int, grid: tuple[int, ...], block: tuple[int, ...],
                 smem_bytes: int, params: PackedArguments) -> None:
        self.params = params
        self._call = _driver().cuLaunchKernel
        self._head = (ctypes.c_void_p(function),
                      *(ctypes.c_uint(v) for v in (*grid, *block, smem_bytes)))
        self._params = ctypes.c_void_p(params.address)

    def __call__(self, stream: int) -> int:
        """Launch on ``stream`` (a ``CUstream`` handle, 0 for the legacy default stream);
        the ``CUresult`` (0: launched)."""
        return self._call(*self._head, stream, self._params, None)


def error_name(result: int) -> str:
    """The driver's name for a ``CUresult``."""
    name = ctypes.c_char_p()
    _driver().cuGetErrorName(result, ctypes.byref(name))
    return name.value.decode() if name.value else f"CUresult {result}"


__all__ = ["DriverLaunch", "DriverLaunchError", "PackedArguments", "error_name",
           "pack_arguments"]
