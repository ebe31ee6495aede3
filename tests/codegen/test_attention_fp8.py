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
from codegen.kernels.attention_fp8 import GROUP_KEYS, KEYS_PER_STEP, key_order, p_register
from codegen.nvcc import nvcc_path
from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_spec
from scheduler_search.ops.attention import FP8_O_REL_ERROR_BOUND
from scheduler_search.space import ScheduleSpace
from scheduler_search.space.designs import FLASH_ATTENTION_3
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


def test_the_transpose_writes_each_column_with_the_key_of_the_order() -> None:
    """The kernel's walk (warp unit: 32 keys by 16 bytes; lane ``group + 8 quad``) puts
    v's key ``key0 + GROUP_KEYS[i]`` at vt column ``column + i``, as :func:`key_order`."""
    keys = 256
    order = key_order(keys)
    written = {}
    for step in range(keys // KEYS_PER_STEP):
        for lane in range(32):
            group = lane & 7
            key0 = step * KEYS_PER_STEP + ((group >> 2) << 4) + ((group & 3) << 1)
            column = step * KEYS_PER_STEP + group * 4
            for i, key in enumerate(GROUP_KEYS):
                written[column + i] = key0 + key
    assert [written[c] for c in range(keys)] == order


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
    assert kernel.sizes["VT"] == 2 * 128 * 128  # two consumers, 128 x 128 bytes each


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_fp8_designs_compile_without_spills() -> None:
    variants = ({"wg_schedule": "alternate"}, {"order": "serial"},
                {"wg_schedule": "alternate", "map_store": "tma"}, {"tile_kv": 64})
    sources = [render(sprogram, spec, DEVICE).source
               for spec, sprogram in (_built(**v) for v in variants)]
    assert all("pack_e4m3x4(" in s and "k32_e4m3_rs_bk(" in s for s in sources)
    assert_compile_clean(sources)
