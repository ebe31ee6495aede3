"""Stand-ins for CuPy and the driver launch, so ``load``'s launch path runs without a GPU:
:class:`FakeCupy` (devices, the current stream, ``RawModule`` compiles, allocations) and
:class:`FakeLaunch` (records each driver launch in the stand-in's ``launches``)."""

from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace

import numpy as np


class FakeArray:
    """A CuPy-like array at a given address."""

    def __init__(self, shape, ptr, dtype="float16"):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.flags = SimpleNamespace(c_contiguous=True)
        self.data = SimpleNamespace(ptr=ptr)
        self.strides = tuple(int(np.prod(self.shape[i + 1:])) * self.dtype.itemsize
                             for i in range(len(self.shape)))
        self.device = SimpleNamespace(id=0)
        self.__cuda_array_interface__ = {"shape": self.shape}


class FakeCupy:
    """What the launch path touches of CuPy: devices, the current stream, RawModule (each
    compile recorded in ``compiled``), ``empty`` and ``zeros``; the driver launches
    (``FakeLaunch``) are recorded in ``launches``."""

    uint8 = np.uint8

    def __init__(self) -> None:
        self.launches: list[tuple] = []
        self.results: list[int] = []  # what the next launches answer
        self.devices_entered: list[int] = []
        self.compiled: list[str] = []  # the source of each RawModule made
        self.allocated = 0
        self.zeroed: list[int] = []  # the sizes of zero-filled allocations (workspaces)
        kernel = SimpleNamespace(kernel=SimpleNamespace(ptr=0xF00D),
                                 max_dynamic_shared_size_bytes=0)
        module = SimpleNamespace(get_function=lambda entry: kernel)
        self.cuda = SimpleNamespace(Device=lambda index: self.devices_entered.append(index)
                                    or nullcontext(),
                                    get_current_stream=lambda device: SimpleNamespace(ptr=0x5))
        self.RawModule = lambda code, options: self.compiled.append(code) or module

    def empty(self, shape, dtype):
        self.allocated += 1
        return FakeArray(shape, 0x7F0000100000 + 0x100000 * self.allocated, dtype)

    def zeros(self, size, dtype):
        self.zeroed.append(size)
        return FakeArray((size,), 0x7E0000000000 + 0x10000000 * len(self.zeroed), dtype)


class FakeLaunch:
    """A driver launch that records its calls (function, grid, block, shared memory,
    packed parameters, stream) in the stand-in CuPy's ``launches`` and answers ``results``
    (then success)."""

    def __init__(self, cupy: FakeCupy, function, grid, block, smem_bytes, params) -> None:
        self.cupy, self.params = cupy, params
        self.head = (function, grid, block, smem_bytes)

    def __call__(self, stream: int) -> int:
        self.cupy.launches.append((*self.head, stream, self.params))
        return self.cupy.results.pop(0) if self.cupy.results else 0
