"""Tensor-map descriptions are checked on the host before the driver sees them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from workers.tensor_maps import TENSOR_MAP_BYTES, check_tensor_map, tensor_map_argument
from workers.testing import gemm_tma_artifact

PARAMS = {"m": 128, "n": 256, "k": 64, "dtype": "bfloat16", "b_layout": "kn"}


def _a_map():
    return gemm_tma_artifact(PARAMS).args[0]


def test_sample_maps_are_valid() -> None:
    for arg in gemm_tma_artifact(PARAMS).args[:2]:
        check_tensor_map(arg)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"global_strides_bytes": ()}, "global strides"),
        ({"box_dims": (32,)}, "box dims"),
        ({"box_dims": (512, 64)}, "box dims"),
        ({"global_strides_bytes": (100,)}, "multiples of 16"),
        ({"dtype": "int4"}, "dtype"),
        ({"box_dims": (4, 64)}, "inner box"),
        ({"swizzle": "32B"}, "swizzle span"),
        ({"element_strides": (1,)}, "element strides"),
    ],
)
def test_invalid_maps_are_rejected_with_a_reason(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_tensor_map(dataclasses.replace(_a_map(), **change))


def test_descriptor_bytes_become_one_by_value_argument() -> None:
    raw = bytes(range(TENSOR_MAP_BYTES))
    arg = tensor_map_argument(raw)
    assert arg.shape == (1,) and arg.dtype.itemsize == TENSOR_MAP_BYTES
    assert arg.tobytes() == raw
    assert isinstance(arg, np.ndarray)
    with pytest.raises(ValueError):
        tensor_map_argument(b"\0" * 64)
