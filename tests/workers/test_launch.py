"""The driver launch's argument packing, without a GPU: each parameter's bytes sit where
``kernelParams`` points, in parameter order, with the C type of its numpy scalar."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from workers.launch import PackedArguments


def _bytes_at(address: int, size: int) -> bytes:
    return ctypes.string_at(address, size)


def test_each_parameter_is_read_through_its_pointer() -> None:
    descriptor = np.arange(16, dtype=np.uint64) * np.uint64(0x0101010101010101)
    values = [np.uint64(0x7F00DEADBEEF), np.int32(-5), np.float32(1.5), descriptor,
              np.int64(-(2**40))]
    packed = PackedArguments(values)
    pointers = (ctypes.c_void_p * len(values)).from_address(packed.address)
    expected = [v.tobytes() for v in values]
    got = [_bytes_at(pointers[i], len(b)) for i, b in enumerate(expected)]
    assert got == expected
    assert packed.values == tuple(values)


def test_a_kernel_without_parameters_packs_an_empty_array() -> None:
    assert PackedArguments([]).address != 0


def test_an_unknown_parameter_type_is_refused() -> None:
    with pytest.raises(TypeError, match="no kernel parameter type for int"):
        PackedArguments([7])
