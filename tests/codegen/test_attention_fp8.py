"""FP8 attention on the CPU: the key order that lets P feed the MMA without shuffles is the
order the transposed v is written in; the spec's scales, bf16 output and its bound; the
reference scales the inputs; the validator and the kernel lay out the same shared memory
(each consumer's transposed v included); the FlashAttention-3 design and its variants
compile for sm_90a without spills."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_checks import assert_compile_clean
from pydantic import ValidationError

from codegen import feasibility, lowering, render
from codegen.kernels.attention_fp8 import (
    INTERLEAVE_HIGH,
    INTERLEAVE_LOW,
    KEYS_PER_STEP,
    LOAD_D,
    LOAD_KEY,
    SEGMENT_KEYS,
    STORE_D,
    UNIT_D_BYTES,
    key_order,
    p_register,
)
from codegen.nvcc import nvcc_path
from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_spec
from scheduler_search.ops.attention import FP8_O_REL_ERROR_BOUND
from scheduler_search.space import ScheduleSpace
from scheduler_search.space.designs import FLASH_ATTENTION_3
from scheduler_search.sprogram.smem import CONSUMER_TILE_BUFFERS
from scheduler_search.sprogram.validate import smem_plan
from workers.verify import attention_reference, reference

DEVICE = get_device("h200")
PARAMS = {"batch": 1, "heads": 8, "kv_heads": 2, "seq_q": 520, "seq_kv": 520, "head_dim": 128,
          "causal": True, "dtype": "float8_e4m3"}
ROTATED = {**FLASH_ATTENTION_3, "map_softmax_exp2": "sfu", "persistent": True,
           "raster_major": "q", "raster_swizzle": 1}


def _score_key(thread: int, index: int) -> tuple[int, int]:
    """(row, key) of S accumulator ``index`` (``4 g + 2 h + e``) of a warpgroup thread."""
    warp, lane = divmod(thread, 32)
    group, rest = divmod(index, 4)
    half, element = divmod(rest, 2)
    return 16 * warp + lane // 4 + 8 * half, 8 * group + 2 * (lane % 4) + element


def _a_column(thread: int, register: int, byte: int) -> tuple[int, int]:
    """(row, column within its k32 step) of an 8-bit A register's byte (PTX ISA's wgmma
    register fragment for k32: rows lane / 4 and + 8, columns 4 (lane % 4) and + 16)."""
    warp, lane = divmod(thread, 32)
    return (16 * warp + lane // 4 + 8 * (register % 2),
            4 * (lane % 4) + 16 * (register // 2) + byte)


def test_p_packs_each_column_with_the_score_of_the_key_vt_puts_there() -> None:
    keys = 128
    order = key_order(keys)
    assert sorted(order) == list(range(keys))
    for thread in range(128):
        for step in range(keys // KEYS_PER_STEP):
            for register in range(4):
                for byte, index in enumerate(p_register(step, register)):
                    row, column = _a_column(thread, register, byte)
                    assert _score_key(thread, index) == (row, order[32 * step + column])


def _lane_rows(lane: int) -> tuple[int, int, int]:
    """The kernel's row-address terms of ``lane`` (its C++ text, evaluated)."""
    names = {"matrix": lane >> 3, "row": lane & 7}
    return tuple(eval(text, {}, names) for text in (LOAD_KEY, LOAD_D, STORE_D))


def _byte_perm(x: list, y: list, selector: int) -> list:
    """PTX ``prmt`` (default mode): byte ``i`` of the result is byte ``selector`` nibble
    ``i`` of ``y:x``."""
    return [(x + y)[(selector >> 4 * i) & 7] for i in range(4)]


@pytest.mark.parametrize(("keys", "head_dim"), [(128, 128), (64, 64), (128, 96)])
def test_the_transpose_writes_each_column_with_the_key_of_the_order(keys: int,
                                                                     head_dim: int) -> None:
    """ldmatrix (lane ``l`` gets row ``l / 4``, bytes ``4 (l % 4)..`` of each matrix), the
    four permutes and stmatrix .trans (its b16 ``h`` to row ``2 (l % 4) + h``, column pair
    ``l / 4``), simulated over every unit: ``vt[d][c] = v[π(c)][d]``."""
    v = [[(key, d) for d in range(head_dim)] for key in range(keys)]
    vt: dict[tuple[int, int], tuple[int, int]] = {}
    segments = keys // SEGMENT_KEYS
    for unit in range(segments * head_dim // UNIT_D_BYTES):
        key0, d0 = (unit % segments) * SEGMENT_KEYS, (unit // segments) * UNIT_D_BYTES
        rows = [_lane_rows(lane) for lane in range(32)]
        for lane in range(32):
            r, q = divmod(lane, 4)
            words = []
            for i in range(4):  # matrix i's row r is lane 8 i + r's address
                load_key, load_d, _ = rows[8 * i + r]
                words.append(v[key0 + load_key][d0 + load_d + 4 * q: d0 + load_d + 4 * q + 4])
            stored = [_byte_perm(x, y, sel) for x, y in (words[:2], words[2:])
                      for sel in (INTERLEAVE_LOW, INTERLEAVE_HIGH)]
            for j, word in enumerate(stored):
                for half in range(2):
                    store_d = rows[8 * j + 2 * q + half][2]
                    for byte in range(2):
                        vt[(d0 + store_d, key0 + 2 * r + byte)] = word[2 * half + byte]
    order = key_order(keys)
    assert len(vt) == keys * head_dim
    assert all(vt[(d, c)] == (order[c], d) for d in range(head_dim) for c in range(keys))


def test_the_spec_takes_scales_and_writes_bf16_to_its_own_bound() -> None:
    spec = parse_spec("attention", PARAMS)
    tensors = {t.name: t for t in spec.tensors()}
    assert [n for n in tensors if n.endswith("_scale")] == ["q_scale", "k_scale", "v_scale"]
    assert tensors["q_scale"].shape == (1,) and tensors["q_scale"].dtype == "float32"
    assert tensors["o"].dtype == "bfloat16"
    assert tensors["o"].rel_error_bound == FP8_O_REL_ERROR_BOUND
    with pytest.raises(ValidationError, match="head_dim"):
        parse_spec("attention", {**PARAMS, "head_dim": 80})  # not a multiple of 32


def test_the_reference_scales_each_input() -> None:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 6, 2, 32)).astype(np.float32) for _ in range(3))
    scales = {f"{n}_scale": np.array([s], np.float32)
              for n, s in zip("qkv", (0.5, 2.0, 1.5), strict=True)}
    out = reference(np, "attention", {**PARAMS, "heads": 2, "kv_heads": 2, "head_dim": 32},
                    {"q": q, "k": k, "v": v, **scales})
    o, lse = attention_reference(np, q * 0.5, k * 2.0, v * 1.5, True)
    np.testing.assert_allclose(out["o"], o, rtol=1e-6)
    np.testing.assert_allclose(out["lse"], lse, rtol=1e-6)


def _built(**change: object):
    spec = parse_spec("attention", PARAMS)
    space = ScheduleSpace(spec, DEVICE, feasibility("attention", DEVICE))
    sprogram, validity = space.build({**ROTATED, **change})
    assert validity.ok, validity
    return spec, sprogram


def test_each_consumer_lays_out_its_own_transposed_v() -> None:
    spec, sprogram = _built()
    graph = spec.graph(sprogram.tile)
    admitted = smem_plan(sprogram, graph, graph.plan)
    kernel = lowering(sprogram, DEVICE).layout.smem
    assert sorted(admitted.sizes.values()) == sorted(kernel.sizes.values())
    # two consumers, a copy per trip parity each, 128 x 128 bytes a copy
    assert kernel.sizes["VT"] == 2 * CONSUMER_TILE_BUFFERS * 128 * 128


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_fp8_designs_compile_without_spills() -> None:
    variants = ({"wg_schedule": "alternate"}, {"order": "serial"},
                {"wg_schedule": "alternate", "map_store": "tma"}, {"tile_kv": 64})
    sources = [render(sprogram, spec, DEVICE).source
               for spec, sprogram in (_built(**v) for v in variants)]
    assert all("pack_e4m3x4(" in s and "k32_e4m3_rs_bk(" in s for s in sources)
    assert_compile_clean(sources)
