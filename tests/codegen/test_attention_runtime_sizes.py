"""Attention kernels that take their sequence lengths at run time: ``SEQ_Q`` (query tiles
counted in the kernel) and ``SEQ_KV`` (the loop's trips, the key mask) as arguments, one
source for every length, the launch contract rebound per length exactly as a kernel
specialised to that length would be launched, and the kernels compiled for sm_90a
without spills."""

from __future__ import annotations

from dataclasses import replace

import pytest
from kernel_checks import assert_compile_clean

from codegen import ScalarArg, render, unsupported
from codegen.nvcc import nvcc_path
from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_spec
from scheduler_search.space.designs import FLASH_ATTENTION_3
from scheduler_search.sprogram import SProgram, plan_sprogram

DEVICE = get_device("h200")
BOTH = ("seq_q", "seq_kv")
#: The FlashAttention-3 design as a range run plans it: persistent, st.global stores.
DESIGN = {**FLASH_ATTENTION_3, "persistent": True, "map_store": "cuda_core"}


def _params(seq_q: int, seq_kv: int, **more: object) -> dict:
    return {"batch": 2, "heads": 16, "kv_heads": 4, "seq_q": seq_q, "seq_kv": seq_kv,
            "head_dim": 128, "causal": False, "dtype": "float16", **more}


def _runtime(params: dict, dims: tuple[str, ...], **choices: object) -> SProgram:
    spec = parse_spec("attention", params)
    return replace(plan_sprogram(spec, DEVICE, {**DESIGN, **choices}), runtime_dims=dims)


@pytest.mark.parametrize("store", ["cuda_core", "tma"])
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("dims", [BOTH, ("seq_kv",), ("seq_q",)])
def test_the_bound_contract_is_the_specialised_kernels(layout: str, dims: tuple[str, ...],
                                                       store: str) -> None:
    """Bound to a length, the run-time kernel's tensor maps (extents and the batch stride
    that grows with the sequence; of o too where TMA stores it), outputs and size
    arguments are those of the kernel planned at that length."""
    top = _params(16384, 16384, layout=layout)
    artifact = render(_runtime(top, dims, map_store=store), device=DEVICE)
    assert artifact.runtime_dims == dims
    assert "SEQ_Q" in artifact.source and "KV_TILES" in artifact.source
    for size in (1, 17, 300, 16383):
        sizes = dict.fromkeys(dims, size)
        bound = artifact.at_sizes(sizes)
        planned = render(_runtime({**top, **sizes}, dims, map_store=store), device=DEVICE)
        assert bound.source == artifact.source and bound.grid == artifact.grid
        assert bound.args == planned.args
        scalars = {a.name: a.value for a in bound.args if isinstance(a, ScalarArg)}
        assert scalars == {d.upper(): size for d in dims}


def test_sizes_in_the_text_are_arguments_only_where_run_time() -> None:
    only_kv = render(_runtime(_params(256, 16384), ("seq_kv",)), device=DEVICE).source
    assert "constexpr int SEQ_Q = 256, HEAD_DIM = 128;" in only_kv
    assert "const int KV_TILES = (SEQ_KV + TILE_KV - 1) / TILE_KV;" in only_kv
    assert "const int SEQ_KV" in only_kv and "constexpr int SEQ_KV" not in only_kv
    both = render(_runtime(_params(16384, 16384), BOTH), device=DEVICE).source
    assert "const int Q_ROWS = SEQ_Q * PACK;" in both
    assert "const int TILES_Q = (Q_ROWS + 127) / 128;" in both
    assert "constexpr int SEQ_Q" not in both and "static_assert(HEADS % KV_HEADS == 0" in both


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_rows_past_a_run_time_query_length_are_not_stored(layout: str) -> None:
    """Planned at a multiple of the tile, a kernel that takes seq_q at run time still
    masks the output's rows at it (else a tile's rows past the end write the next head's
    or batch's rows), and a block left without a tile (fewer tiles than blocks at a short
    length) skips the consumers' last hand-over, which only a turn taken leaves."""
    source = render(_runtime(_params(2048, 2048, layout=layout), BOTH), device=DEVICE).source
    static = render(_runtime(_params(2048, 2048, layout=layout), ()), device=DEVICE).source
    mask = "if (row >= Q_ROWS) continue;"
    assert mask in source and mask not in static
    assert "if (consumer == 0 && !first_turn)" in source


def test_a_query_length_at_run_time_needs_a_persistent_grid() -> None:
    params = _params(16384, 16384)
    one_per_tile = _runtime(params, BOTH, persistent=False)
    assert "persistent" in (unsupported(one_per_tile, DEVICE) or "")
    assert unsupported(_runtime(params, ("seq_kv",), persistent=False), DEVICE) is None


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_runtime_sequence_kernels_compile_without_spills() -> None:
    sources = []
    for causal, layout, dims in ((False, "bshd", BOTH), (True, "bhsd", BOTH),
                                 (True, "bshd", ("seq_kv",))):
        params = _params(16384, 16384, causal=causal, layout=layout)
        for choices in ({}, {"tile_kv": 64, "stages_k": 3, "stages_v": 3}):
            sources.append(render(_runtime(params, dims, **choices), device=DEVICE).source)
    assert len(set(sources)) == len(sources)
    assert_compile_clean(sources)
