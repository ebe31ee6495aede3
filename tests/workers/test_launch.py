"""The driver launch's argument packing, without a GPU: each parameter's bytes sit where
``kernelParams`` points, in parameter order, with the C type of its numpy scalar; a
workspace is passed as its pointer, like a tensor."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from codegen.artifact import ScalarArg, TensorArg, TensorMapArg, WorkspaceArg
from workers.launch import PackedArguments, pack_arguments


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


def test_a_workspace_is_packed_as_its_pointer_in_launch_order() -> None:
    args = (TensorArg("a", "float16", (4,), "input"), WorkspaceArg("ws", 1 << 20),
            ScalarArg("n", "int32", 4), TensorArg("c", "float16", (4,), "output"))
    pointers = {"a": 0x7F0000000000, "ws": 0x7F0000100000, "c": 0x7F0000200000}

    def no_tensor_map(arg: TensorMapArg, pointer: int) -> np.ndarray:
        raise AssertionError(f"{arg.name} is not a tensor map")

    packed = pack_arguments(args, pointers, no_tensor_map)
    assert packed.values == (np.uint64(0x7F0000000000), np.uint64(0x7F0000100000),
                             np.int32(4), np.uint64(0x7F0000200000))
    assert isinstance(packed.values[1], np.uint64)


def test_an_argument_of_no_known_kind_is_refused() -> None:
    with pytest.raises(TypeError, match="no kernel parameter for argument"):
        pack_arguments([object()], {}, lambda arg, pointer: np.zeros(16, np.uint64))  # type: ignore[list-item]
