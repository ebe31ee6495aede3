"""Attention on the pipeline skeleton, on the CPU: sampled schedules of the attention space
compile with nvcc for sm_90a without spills; the launch contract (rank-4 tensor maps over
(head_dim, heads, seq, batch), the output tensor of the spec) agrees with the kernel; what
the skeleton cannot lower yet is kept out of the space with its reason."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from kernel_checks import assert_compile_clean
from schedule_samples import sample_schedules

from codegen import feasibility, lowering, render, unsupported
from codegen.nvcc import compile_report, nvcc_path
from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_spec
from scheduler_search.space import ScheduleSpace
from workers.tensor_maps import check_tensor_map

DEVICE = get_device("h200")
CAUSAL_GQA = {"batch": 1, "heads": 32, "kv_heads": 8, "seq_q": 2048, "seq_kv": 2048,
              "head_dim": 128, "causal": True, "dtype": "float16"}
ODD = {"batch": 2, "heads": 8, "kv_heads": 8, "seq_q": 300, "seq_kv": 700, "head_dim": 64,
       "causal": False, "dtype": "bfloat16"}
DESIGN = {"tile_q": 128, "tile_kv": 128, "warp_specialized": True, "consumer_warpgroups": 2,
          "consumer_split": "cooperative", "wg_schedule": "free", "producer_regs": 24,
          "stages_k": 2, "stages_v": 2, "order": "serial", "map_softmax_exp2": "sfu",
          "map_store": "cuda_core", "persistent": True, "raster_major": "q",
          "raster_swizzle": 1}


def _spec(params: dict) -> object:
    return parse_spec("attention", params)


def test_kernel_reads_the_spec_layout_through_rank_4_tensor_maps() -> None:
    spec = _spec(CAUSAL_GQA)
    space = ScheduleSpace(spec, DEVICE, feasibility("attention", DEVICE))
    sprogram, validity = space.build(DESIGN)
    assert validity.ok, validity
    art = render(sprogram, spec, DEVICE)
    maps = {a.name: a for a in art.args if a.kind == "tensor_map"}
    assert maps["q_map"].global_dims == (128, 32, 2048, 1)
    assert maps["k_map"].global_dims == (128, 8, 2048, 1) == maps["v_map"].global_dims
    assert maps["q_map"].box_dims == (64, 1, 128, 1) and maps["k_map"].box_dims == (64, 1, 128, 1)
    out, lse = [a for a in art.args if a.kind == "tensor"]
    assert out.name == "o" and out.shape == (1, 2048, 32, 128) and out.role == "output"
    assert (lse.name, lse.dtype, lse.shape, lse.role) == ("lse", "float32", (1, 32, 2048),
                                                          "output")
    src = art.source
    assert "heads0 / GROUP" in src and "constexpr bool CAUSAL = true;" in src
    assert "min(KV_TILES, ((q0 + TILE_Q - 1) / PACK + TILE_KV) / TILE_KV)" in src  # skips masked
    assert "exp2_approx" in src and "wgmma_m64n128k16_f16_rs_bmn" in src
    assert art.grid == (DEVICE.sm_count, 1, 1) and art.block == (384, 1, 1)
    record = lowering(sprogram, DEVICE).record
    assert record.tile_buffers == {"load_q": ("load_q_full", "load_q_empty")}
    assert render(sprogram, spec, DEVICE).source == src  # deterministic


def test_sdpa_layout_reads_heads_before_rows() -> None:
    spec = _spec({**CAUSAL_GQA, "layout": "bhsd"})
    space = ScheduleSpace(spec, DEVICE, feasibility("attention", DEVICE))
    sprogram, validity = space.build(DESIGN)
    assert validity.ok, validity
    art = render(sprogram, spec, DEVICE)
    maps = {a.name: a for a in art.args if a.kind == "tensor_map"}
    # (head_dim, seq, heads, batch): a box is 128 rows of one head.
    assert maps["q_map"].global_dims == (128, 2048, 32, 1)
    assert maps["k_map"].global_dims == (128, 2048, 8, 1)
    assert maps["q_map"].global_strides_bytes == (256, 2048 * 256, 32 * 2048 * 256)
    assert maps["q_map"].box_dims == (64, 128, 1, 1)
    out = next(a for a in art.args if a.name == "o")
    assert out.shape == (1, 32, 2048, 128)
    assert "(batch0 * HEADS + heads0) * SEQ_Q" in art.source
    assert "q_map, 0, q0 / PACK, heads0, batch0" in art.source  # (d, row, head, batch)


def test_gqa_heads_packed_into_a_tile_share_its_kv_loads() -> None:
    """tile_g query heads of a kv group in one tile: the q box spans them (positions x
    heads, one TMA box), the grid has heads / g tiles along heads, rows map back to
    (position, head) in the mask, the output and the log-sum-exp."""
    spec = _spec({**CAUSAL_GQA, "seq_q": 1, "seq_kv": 777})
    space = ScheduleSpace(spec, DEVICE, feasibility("attention", DEVICE))
    sprogram, validity = space.build({**DESIGN, "order": "rotate", "tile_g": 4, "tile_q": 64,
                                      "consumer_warpgroups": 1})
    assert validity.ok, validity
    art = render(sprogram, spec, DEVICE)
    maps = {a.name: a for a in art.args if a.kind == "tensor_map"}
    assert maps["q_map"].box_dims == (64, 4, 16, 1)  # 16 positions x 4 heads = 64 rows
    assert maps["k_map"].box_dims == (64, 1, 128, 1)
    src = art.source
    assert "constexpr int PACK = 4, Q_ROWS = SEQ_Q * PACK;" in src
    assert "TILES_HEADS = 8" in src  # 32 query heads, 4 per tile
    assert "/ PACK) * HEADS + heads0 + (" in src and "row % PACK) * SEQ_Q + row / PACK" in src


def test_sdpa_layout_packs_a_groups_heads_one_after_the_other() -> None:
    """In bhsd a box of (head_dim, positions, heads) holds each packed head's TILE_Q / PACK
    positions in turn: masks, lse and o index rows head by head; a query length that
    leaves a head's positions part of a tile is refused with its reason."""
    bhsd = _spec({**CAUSAL_GQA, "layout": "bhsd"})
    space = ScheduleSpace(bhsd, DEVICE, feasibility("attention", DEVICE))
    sprogram, validity = space.build({**DESIGN, "tile_g": 2})
    assert validity.ok, validity
    art = render(sprogram, bhsd, DEVICE)
    maps = {a.name: a for a in art.args if a.kind == "tensor_map"}
    assert maps["q_map"].box_dims == (64, 64, 2, 1)  # 64 positions x 2 heads = 128 rows
    src = art.source
    assert "head by head: TILE_Q / PACK positions of each" in src
    assert "const int row = q0 / PACK + (row0 + mi * 64" in src  # the mask's query position
    assert "HEADS + heads0 + (row - q0) / (TILE_Q / PACK)) * SEQ_Q + q0 / PACK + (row - q0) % " \
        "(TILE_Q / PACK)]" in src  # lse
    assert "heads0 + ((row) - q0) / (TILE_Q / PACK)) * SEQ_Q + q0 / PACK + ((row) - q0) % " \
        "(TILE_Q / PACK)) * HEAD_DIM" in src  # o
    assert "(CAUSAL && kv0 + TILE_KV - 1 > q0 / PACK)" in src  # masks from the least position
    odd = _spec({**CAUSAL_GQA, "layout": "bhsd", "seq_q": 2000, "seq_kv": 2000})
    packed_odd, validity = ScheduleSpace(odd, DEVICE, feasibility("attention", DEVICE)).build(
        {**DESIGN, "tile_g": 2})
    assert not validity.ok and "multiple of the 64 positions" in (
        unsupported(packed_odd, DEVICE) or "")
    assert_compile_clean([src])


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_the_output_is_stored_by_tma_through_rank_4_boxes_of_a_consumers_rows() -> None:
    """O staged in shared memory and stored by TMA through a map like q's: a consumer's
    rows are one box (one head's positions; packed heads' positions side by side in bshd,
    head after head in bhsd), at the coordinates of its first row, and its rows' lse one
    box of a rank-3 map beside it, in the same bulk group; a consumer whose rows would
    split a box is refused with its reason."""
    sources = []
    for layout, change, box, call, lse_call in (
        ("bshd", {}, (64, 1, 64, 1), "tma_store_4d(&o_map, 0 + s * STORE_COLS, heads0, "
         "(q0 + row0) / PACK, batch0, buf)", "(q0 + row0) / PACK, heads0, batch0, side_buf)"),
        ("bhsd", {}, (64, 64, 1, 1), "tma_store_4d(&o_map, 0 + s * STORE_COLS, q0 + row0, "
         "heads0, batch0, buf)", "q0 + row0, heads0, batch0, side_buf)"),
        ("bshd", {"tile_g": 4, "tile_q": 64, "consumer_warpgroups": 1}, (64, 4, 16, 1),
         "heads0, (q0 + row0) / PACK, batch0, buf)", "(q0 + row0) / PACK, heads0, batch0"),
        ("bhsd", {"tile_g": 4, "tile_q": 64, "consumer_warpgroups": 1}, (64, 16, 4, 1),
         "q0 / PACK + row0 % (TILE_Q / PACK), heads0 + row0 / (TILE_Q / PACK), batch0, buf)",
         "q0 / PACK + row0 % (TILE_Q / PACK), heads0 + row0 / (TILE_Q / PACK), batch0, side"),
        ("bhsd", {"tile_g": 2}, (64, 64, 1, 1), "heads0 + row0 / (TILE_Q / PACK)",
         "q0 / PACK + row0 % (TILE_Q / PACK), heads0 + row0 / (TILE_Q / PACK), batch0, side"),
        ("bhsd", {"persistent": False}, (64, 64, 1, 1), "q0 + row0, heads0",
         "q0 + row0, heads0, batch0, side_buf"),
    ):
        spec = _spec({**CAUSAL_GQA, "layout": layout})
        space = ScheduleSpace(spec, DEVICE, feasibility("attention", DEVICE))
        sprogram, validity = space.build({**DESIGN, "map_store": "tma", **change})
        assert validity.ok, (layout, change, unsupported(sprogram, DEVICE))
        art = render(sprogram, spec, DEVICE)
        o_map = next(a for a in art.args if a.name == "o_map")
        dims = (128, 32, 2048, 1) if layout == "bshd" else (128, 2048, 32, 1)
        assert (o_map.global_dims, o_map.box_dims) == (dims, box), (layout, change)
        assert o_map.global_strides_bytes == (256, dims[1] * 256, dims[1] * dims[2] * 256)
        assert call in art.source and "unsigned short* __restrict__ o" not in art.source
        lse_map = next(a for a in art.args if a.name == "lse_map")
        assert (lse_map.global_dims, lse_map.global_strides_bytes) == (
            (2048, 32, 1), (2048 * 4, 32 * 2048 * 4))
        assert lse_map.box_dims == (box[1], box[2], 1) if layout == "bhsd" else (
            box[2], box[1], 1)  # positions, then heads
        assert f"tma_store_3d(&lse_map, {lse_call}" in art.source
        assert "float* __restrict__ lse" not in art.source
        for tensor_map in (o_map, lse_map):
            check_tensor_map(tensor_map)
        assert art.extra["staging"] == ("operands" if change.get("persistent") is False
                                        else "ring")
        sources.append(art.source)
    assert_compile_clean(sources)
    spec = _spec({**CAUSAL_GQA, "layout": "bhsd", "seq_q": 1920, "seq_kv": 1920})
    split, _ = ScheduleSpace(spec, DEVICE, feasibility("attention", DEVICE)).build(
        {**DESIGN, "map_store": "tma", "tile_g": 2, "tile_q": 192, "consumer_warpgroups": 3})
    assert "neither lie in one head's 96 positions" in (unsupported(split, DEVICE) or "")
    # lse rows of a head not whole 16-byte strides: o by TMA, lse by the row's first thread.
    spec = _spec({**CAUSAL_GQA, "seq_q": 2047, "seq_kv": 2047})
    odd, _ = ScheduleSpace(spec, DEVICE, feasibility("attention", DEVICE)).build(
        {**DESIGN, "map_store": "tma"})
    art = render(odd, spec, DEVICE)
    assert "tma_store_4d(&o_map" in art.source and "lse_map" not in art.source
    assert "float* __restrict__ lse" in art.source and "lse[(" in art.source


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_pingpong_consumers_each_loop_over_a_query_tile_of_their_own() -> None:
    """Pingpong: a unit holds one 64-row query tile per consumer warpgroup, each with its
    own copy of q (loaded for every owner before the owners' trips, waited for and released
    by its owner alone); causal tiles of unequal trips place each owner's loads after the
    earlier owners' actual trips; both layouts and stores compile without spills. The chunk
    scan (a state MMA on its tile buffers before the loop) keeps pingpong out, saying why."""
    pingpong = {**DESIGN, "tile_q": 64, "consumer_split": "pingpong", "wg_schedule": "alternate"}
    sources = []
    for layout in ("bshd", "bhsd"):
        for store in ("cuda_core", "tma"):
            spec = _spec({**CAUSAL_GQA, "layout": layout})
            space = ScheduleSpace(spec, DEVICE, feasibility("attention", DEVICE))
            sprogram, validity = space.build({**pingpong, "map_store": store})
            assert validity.ok, (layout, store, unsupported(sprogram, DEVICE))
            sources.append(render(sprogram, spec, DEVICE).source)
    src = sources[0]
    assert "void load_tile_load_q(int owner, u32 empty_parity" in src
    assert "const u32 full = load_q_full(smem, owner);" in src
    assert "+ owner * Q_STAGE_BYTES" in src  # the load into the owner's copy
    assert "const u32 q_tile = smem + SMEM_Q + consumer * Q_STAGE_BYTES + row0 * 128;" in src
    assert "mbarrier_wait(load_q_full(smem, consumer), tile_phase);" in src
    assert "mbarrier_arrive_warp(load_q_empty(smem, consumer), lane);" in src
    assert "if (owner < consumer) x0 += owner_trips;" in src  # causal: unequal trips
    start = src.index("Producer warpgroup")
    producer = src[start:src.index("setmaxnreg_inc", start)]
    assert producer.index("load_tile_load_q(owner") < producer.index("load_k(")
    assert_compile_clean(sources)
    scan = parse_spec("mamba2_chunk_scan", {"batch": 1, "seqlen": 1024, "nheads": 8,
                                            "headdim": 64, "dstate": 128, "ngroups": 1,
                                            "chunk_size": 256, "dtype": "float16"})
    from scheduler_search.space.designs import MAMBA2_CHUNK_SCAN
    sprogram, _ = ScheduleSpace(scan, DEVICE, feasibility("mamba2_chunk_scan", DEVICE)).build(
        {**MAMBA2_CHUNK_SCAN, "consumer_split": "pingpong", "wg_schedule": "alternate",
         "tile_l": 64})
    assert "pingpong consumers" in (unsupported(sprogram, DEVICE) or "")  # its state MMA


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_a_steady_loop_of_one_trip_keeps_its_bound_hidden_and_does_not_spill() -> None:
    """FlashAttention-3's rotated loop over 256 keys in 128-key tiles: prologue, one steady
    trip and the last; a bound ptxas can read makes the three one block of code, which it
    spilled 228 bytes of at head_dim 64. Hidden, it compiles clean; three trips or a
    run-time length keep the plain bound."""
    from scheduler_search.space.designs import FLASH_ATTENTION_3

    design = {**FLASH_ATTENTION_3, "map_softmax_exp2": "sfu", "persistent": True}
    texts = {}
    for seq in (256, 384):
        spec = _spec({**ODD, "seq_q": seq, "seq_kv": seq, "head_dim": 64, "dtype": "float16"})
        sprogram, validity = ScheduleSpace(spec, DEVICE, feasibility("attention", DEVICE)).build(
            design)
        assert validity.ok, validity
        texts[seq] = render(sprogram, spec, DEVICE).source
    assert 'asm volatile("" : "+r"(steady_trips));' in texts[256]
    assert "trip < steady_trips" in texts[256] and "steady_trips" not in texts[384]
    assert "for (int trip = 0; trip < KV_TILES - 1; ++trip)" in texts[384]
    assert_compile_clean(list(texts.values()))


def test_exp2_follows_the_seu_of_softmax_exp2() -> None:
    spec = _spec(ODD)
    space = ScheduleSpace(spec, DEVICE, feasibility("attention", DEVICE))
    on_cores, _ = space.build({**DESIGN, "map_softmax_exp2": "cuda_core"})
    text = render(on_cores, spec, DEVICE).source
    assert "exp2f(" in text and "ex2.approx" not in text
    assert "constexpr bool CAUSAL = false;" in text


def test_what_is_not_lowered_yet_is_out_of_the_space_with_a_reason() -> None:
    spec = _spec(CAUSAL_GQA)
    space = ScheduleSpace(spec, DEVICE, feasibility("attention", DEVICE))
    for change, reason in (
        ({"order": "overlap"}, "overwrite the scores"),
        ({"warp_specialized": False}, "trip counts"),
    ):
        sprogram, validity = space.build({**DESIGN, **change})
        assert not validity.ok and reason in (unsupported(sprogram, DEVICE) or ""), change
        assert validity.rejections[0].detail.startswith("codegen: ")


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_sampled_attention_schedules_compile_without_spills() -> None:
    sources = []
    for params, dtype in ((CAUSAL_GQA, "float16"), (ODD, "bfloat16")):
        spec = _spec({**params, "dtype": dtype})
        sources += [render(sp, spec, DEVICE).source
                    for sp in sample_schedules(spec, DEVICE, 4, seed=2026)]
    reports = assert_compile_clean(sources)
    assert all(0 < r.registers <= 255 for r in reports)


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_flash_attention_3_order_keeps_the_wgmma_pipeline() -> None:
    """The rotated loop (q·kᵀ of trip t+1 and p·v of trip t back to back, the softmax of
    t+1 under p·v, the warpgroups taking turns) compiles to wgmma that ptxas does not
    serialise, at the 168 registers of a 384-thread block."""
    spec = _spec(CAUSAL_GQA)
    space = ScheduleSpace(spec, DEVICE, feasibility("attention", DEVICE))
    sources = []
    for change in ({}, {"wg_schedule": "alternate"}, {"tile_kv": 64, "stages_k": 3}):
        sprogram, validity = space.build({**DESIGN, "order": "rotate", **change})
        assert validity.ok, (change, validity)
        sources.append(render(sprogram, spec, DEVICE).source)
    text = sources[0]
    assert "wgmma_wait<1>();" in text  # softmax of t+1 waits for q·kᵀ, not for p·v
    assert "for (int trip = 0; trip < trips - 1; ++trip)" in text
    with ThreadPoolExecutor(2) as pool:
        reports = list(pool.map(compile_report, sources))
    for report in reports:
        assert report.ok and not report.spills, report.log[-400:]
        assert "serialized" not in report.log and "C75" not in report.log, report.log


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_head_dim_96_lays_its_rows_in_64_byte_swizzle_boxes_and_compiles() -> None:
    """A 192-byte row fits no 128-byte span: q, k and v come in three 64B-swizzled boxes
    each (v, the MN-major B of P V, included), and the kernels compile without spills."""
    spec = _spec({**ODD, "head_dim": 96, "kv_heads": 2, "causal": True})
    space = ScheduleSpace(spec, DEVICE, feasibility("attention", DEVICE))
    sprogram, validity = space.build({**DESIGN, "tile_kv": 64})
    assert validity.ok, validity
    art = render(sprogram, spec, DEVICE)
    maps = {a.name: a for a in art.args if a.kind == "tensor_map"}
    assert {maps[m].box_dims[0] for m in ("q_map", "k_map", "v_map")} == {32}
    assert {maps[m].swizzle for m in ("q_map", "k_map", "v_map")} == {"64B"}
    assert "V_BOX_BYTES = 4096, V_STAGE_BYTES = 12288;" in art.source
    assert "wgmma_m64n96k16" in art.source
    sources = [art.source] + [render(sp, spec, DEVICE).source
                              for sp in sample_schedules(spec, DEVICE, 2, seed=96)]
    reports = assert_compile_clean(sources)
    assert all(0 < r.registers <= 255 for r in reports)
