"""Mamba2 chunk state and chunk scan on the pipeline skeleton, on the CPU: sampled schedules
of both spaces compile with nvcc for sm_90a without spills; the launch contract (tensor
maps over mamba_ssm's layouts, the pointers the CUDA cores read, the fp32 states) agrees
with the spec; the prologue (chunk scan's state term) is written once per tile and frees
its buffers before the loop; what is not lowered is out of the space with its reason."""

from __future__ import annotations

import re

import pytest
from kernel_checks import assert_compile_clean
from schedule_samples import sample_schedules

from codegen import feasibility, lowering, render, unsupported
from codegen.nvcc import compile_report, nvcc_path
from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_spec
from scheduler_search.space import ScheduleSpace
from scheduler_search.space.designs import MAMBA2_CHUNK_SCAN, MAMBA2_CHUNK_STATE

DEVICE = get_device("h200")
SUITE = {"batch": 8, "seqlen": 4096, "nheads": 80, "headdim": 64, "dstate": 128,
         "ngroups": 1, "chunk_size": 256, "dtype": "float16"}
GROUPED = {"batch": 2, "seqlen": 768, "nheads": 16, "headdim": 128, "dstate": 64,
           "ngroups": 4, "chunk_size": 128, "dtype": "bfloat16"}
#: The chunk state fused with the state passing, from initial states.
PASSING = {"pass_states": True, "initial_states": True}
#: The chunk scan gated by z, with D per channel.
GATED = {"z": True, "d_per_channel": True}


def _build(op: str, params: dict, choices: dict) -> tuple:
    spec = parse_spec(op, params)
    space = ScheduleSpace(spec, DEVICE, feasibility(op, DEVICE))
    sprogram, validity = space.build(choices)
    return spec, sprogram, validity


def test_chunk_state_reads_mamba_layouts_and_writes_fp32_states() -> None:
    spec, sprogram, validity = _build("mamba2_chunk_state", SUITE, MAMBA2_CHUNK_STATE)
    assert validity.ok, validity
    art = render(sprogram, spec, DEVICE)
    maps = {a.name: a for a in art.args if a.kind == "tensor_map"}
    # x (batch, seqlen, nheads, headdim) and B (batch, seqlen, ngroups, dstate): rank 3,
    # one head's rows per box.
    assert maps["x_map"].global_dims == (64, 80, 8 * 4096)
    assert maps["x_map"].box_dims == (64, 1, 128)
    assert maps["b_map"].global_dims == (128, 1, 8 * 4096)
    assert maps["dt_map"].global_dims == (256, 16, 8 * 80) and maps["dt_map"].swizzle == "none"
    tensors = [(a.name, a.dtype, a.shape, a.role) for a in art.args if a.kind == "tensor"]
    assert tensors == [("states", "float32", (8, 16, 80, 64, 128), "output"),
                       ("dA_cumsum", "float32", (8, 80, 16, 256), "input")]
    src = art.source
    assert "ldmatrix_x4_trans" in src and "wgmma_m64n128k16_f16_rs_bmn" in src
    assert "exp2_approx" in src and "make_float2" in src  # SFU decay, fp32 stores
    assert art.grid == (1 * 1 * 80 * 16 * 8, 1, 1)  # one (head, chunk, batch) tile per block


def test_chunk_scan_prologue_runs_once_per_tile_and_frees_its_buffers() -> None:
    _, sprogram, validity = _build("mamba2_chunk_scan", SUITE,
                                   {**MAMBA2_CHUNK_SCAN, "map_vector_loads": "cuda_core"})
    assert validity.ok, validity
    lowered = lowering(sprogram, DEVICE)
    src = lowered.source
    prologue, loop = src.index("mma_state: acc"), src.index("// Main loop:")
    assert prologue < loop
    # The state term is waited for before its decay; C and states are released before the
    # loop, so the producer loads the next tile's while this one's loop runs.
    between = src[prologue:loop]
    assert "wgmma_wait<0>();" in between and "exp2f(dal[(8 * g) / HEAD_COLS][mi][h])" in between
    assert "load_c_empty" in between and "load_state_empty" in between
    assert "min(S_TILES, (l0 + TILE_L + TILE_S - 1) / TILE_S)" in src  # causal trips only
    assert "!diagonal ||" in src and "d * v.x" in src  # mask on crossing trips; D x
    # x for D x is read at the tile's start, so the read lands while the loop runs.
    assert src.index("x_skip[mi][h][g] = __ldg") < prologue
    art = lowered.artifact()
    pointers = [a.name for a in art.args if a.kind == "tensor" and a.role == "input"]
    assert pointers == ["x", "D", "dt", "dA_cumsum"]  # dt, dA loaded by the CUDA cores
    issues = {i.stask: i.phase for i in lowered.record.roles["consumer0"]}
    assert issues["mma_state"] == "prologue" and issues["skip"] == "epilogue"


@pytest.mark.parametrize("packed", [False, True])
def test_chunk_scan_computes_c_b_in_its_tile(packed: bool) -> None:
    """cb_in_tile: the loop loads B tiles (b_map, no cb), a second wgmma (N = tile_s, over
    dstate) computes the trip's cb into registers from the C tile buffer, which is held
    through the loop and released after it; the products read cb from registers and, with
    seq_idx, drop the pairs of different sequences; only the serial order is offered."""
    params = {**SUITE, "cb_in_tile": True, "seq_idx": packed}
    spec, sprogram, validity = _build("mamba2_chunk_scan", params, MAMBA2_CHUNK_SCAN)
    assert validity.ok, validity
    assert spec.tensors()[0].name == "b"
    lowered = lowering(sprogram, DEVICE)
    src = lowered.source
    maps = {a.name for a in lowered.artifact().args if a.kind == "tensor_map"}
    assert "b_map" in maps and "cb_map" not in maps and "SMEM_CB " not in src
    loop = src.index("// Main loop:")
    assert src.index("mma_cb  stage=") > loop
    assert f"wgmma_m64n{sprogram.tile['s']}k16" in src[loop:]
    assert "make_float2(cb[mi][4 * g + 2 * h], cb[mi][4 * g + 2 * h + 1])" in src
    assert ("seq_s.x == seq_row" in src) == packed
    # C stays in its buffer for the loop's mma_cb: released after the loop, not before.
    assert src.index("load_c_empty", loop) > src.index("mma_cb  stage=")
    space = ScheduleSpace(spec, DEVICE, feasibility(spec.op, DEVICE))
    _, overlap = space.build({**MAMBA2_CHUNK_SCAN, "order": "overlap"})
    assert not overlap.ok


def test_chunk_scan_packs_heads_of_a_group_side_by_side() -> None:
    """tile_g 2: one tile spans two heads' whole rows (tile_p = 2 x headdim); cb, C and the
    states of both heads are loaded once, x box by box (head heads0 + 1 for the second),
    and each head's products run on its own half of the accumulator."""
    spec, sprogram, validity = _build("mamba2_chunk_scan", SUITE,
                                      {**MAMBA2_CHUNK_SCAN, "tile_g": 2, "tile_p": 128})
    assert validity.ok, validity
    art = render(sprogram, spec, DEVICE)
    src = art.source
    assert art.grid[0] <= DEVICE.sm_count  # persistent; the tile count is below
    assert "PACK = 2, HEAD_COLS = 64" in src
    assert "heads0 + 1, batch0 * SEQLEN + chunks0 * CHUNK" in src  # x box of the second head
    assert "wgmma_m64n128k16_f16_bk" in src  # C statesᵀ for both heads in one N = 128
    assert src.count("wgmma_m64n64k16_f16_rs_bmn(*reinterpret_cast<float(*)[HEAD_COLS / 2]>"
                     "(&acc[mi][1 * (HEAD_COLS / 2)])") == 1
    assert "pm[1][mi][2 * g + h]" not in src and "pm[head][mi][2 * g + h]" in src
    maps = {a.name: a for a in art.args if a.kind == "tensor_map"}
    assert maps["states_map"].box_dims == (64, 128)  # both heads' rows: contiguous
    assert maps["dt_map"].box_dims == (64, 1, 2)  # each packed head's positions in turn
    assert spec.build_graph(sprogram.tile).grid_axes["heads"] == 40  # 80 heads, two a tile
    for bad, reason in (({"tile_p": 64}, "tile_p must be headdim x tile_g"),):
        _, rejected, verdict = _build("mamba2_chunk_scan", SUITE,
                                      {**MAMBA2_CHUNK_SCAN, "tile_g": 2, **bad})
        assert not verdict.ok and reason in (unsupported(rejected, DEVICE) or "")


def test_chunk_scan_keeps_its_wgmma_in_flight_with_products_per_trip_parity() -> None:
    """Order overlap: a trip's wgmma stays in flight while the next trip's math writes the
    other copy of the products (chosen by trip parity, constant indices in each branch);
    the previous group is waited for after the issue. The chunk state's scaled x the same."""
    spec, sprogram, validity = _build("mamba2_chunk_scan", SUITE,
                                      {**MAMBA2_CHUNK_SCAN, "order": "overlap"})
    assert validity.ok, validity
    src = render(sprogram, spec, DEVICE).source
    assert "u32 pm[2][PACK][ROW_BLOCKS][E_REGS / 2];" in src
    assert src.count("if (((trip) & 1) == 0) {") == 2  # scale_cb and mma_x
    assert "pm[1][head][mi][2 * g + h] = pack_f16x2(v0, v1);" in src
    assert "pm[1][0][mi][4 * kk + 3], desc_b, true);" in src
    loop = src[src.index("// Main loop:"):]
    assert loop.index("wgmma_wait<1>();") < loop.index("wgmma_wait<0>();")
    spec, sprogram, validity = _build("mamba2_chunk_state", SUITE,
                                      {**MAMBA2_CHUNK_STATE, "order": "overlap"})
    assert validity.ok, validity
    src = render(sprogram, spec, DEVICE).source
    assert "u32 xa[2][ROW_BLOCKS][4 * K_STEPS];" in src and "xa[1][mi][4 * kk + j] =" in src


def test_vector_loads_by_tma_read_the_ring_stage() -> None:
    spec, sprogram, validity = _build("mamba2_chunk_scan", GROUPED,
                                      {**MAMBA2_CHUNK_SCAN, "map_vector_loads": "tma"})
    assert validity.ok, validity
    art = render(sprogram, spec, DEVICE)
    maps = {a.name: a for a in art.args if a.kind == "tensor_map"}
    assert {"dA_l_map", "dt_map", "dA_map"} <= set(maps)
    assert maps["cb_map"].dtype == "float32" and maps["cb_map"].box_dims == (32, 128)
    assert "ld_shared_f32x2(smem + SMEM_DT + cb_stage" in art.source
    assert [a.name for a in art.args if a.kind == "tensor" and a.role == "input"] == ["x", "D"]


def test_chunk_state_states_by_tma_are_staged_in_the_idle_ring() -> None:
    """fp32 states through TMA: 8-byte st.shared into 128B-swizzled 32-column sub-tiles of
    the ring stages, one box per sub-tile of states seen as a (batch x chunk x head x p)
    by dstate matrix."""
    spec, sprogram, validity = _build("mamba2_chunk_state", SUITE,
                                      {**MAMBA2_CHUNK_STATE, "map_store": "tma"})
    assert validity.ok, validity
    art = render(sprogram, spec, DEVICE)
    maps = {a.name: a for a in art.args if a.kind == "tensor_map"}
    p = SUITE
    rows = p["batch"] * (p["seqlen"] // p["chunk_size"]) * p["nheads"] * p["headdim"]
    assert maps["states_map"].global_dims == (p["dstate"], rows)
    assert maps["states_map"].box_dims == (32, 64) and maps["states_map"].swizzle == "128B"
    assert "states" not in [a.name for a in art.args if a.kind == "tensor"]
    assert art.extra["staging"] == "operands" and art.extra["smem_layout"]["C"] == 0
    assert "st_shared_f32x2(buf + swizzle_128b(row * C_ROW_BYTES + col_bytes)" in art.source
    assert "stmatrix" not in art.source.split("__global__")[1]


@pytest.mark.parametrize("store", ["cuda_core", "tma"])
def test_chunk_state_writes_states_in_the_inputs_dtype_when_asked(store: str) -> None:
    """``states_in_fp32: false`` (as ``_chunk_state_fwd``'s): 16-bit states, half the bytes;
    by TMA through stmatrix-staged 64-column sub-tiles; compiled without spills."""
    params = {**SUITE, "dtype": "bfloat16", "states_in_fp32": False}
    spec, sprogram, validity = _build("mamba2_chunk_state", params,
                                      {**MAMBA2_CHUNK_STATE, "map_store": store})
    assert validity.ok, validity
    art = render(sprogram, spec, DEVICE)
    maps = {a.name: a for a in art.args if a.kind == "tensor_map"}
    tensors = {a.name: a.dtype for a in art.args if a.kind == "tensor"}
    if store == "tma":
        assert maps["states_map"].dtype == "bfloat16"
        assert maps["states_map"].box_dims == (64, 64)  # 128-byte rows of 16-bit states
        assert "stmatrix" in art.source.split("__global__")[1]
    else:
        assert tensors["states"] == "bfloat16"
    assert "st_shared_f32x2" not in art.source.split("__global__")[1]
    if nvcc_path() is not None:
        report = compile_report(art.source)
        assert report.ok and not report.spills, report.log[-400:]


def test_what_is_not_lowered_is_out_of_the_space_with_a_reason() -> None:
    for op, design, change, reason in (
        ("mamba2_chunk_scan", MAMBA2_CHUNK_SCAN, {"map_store": "tma"}, "st.global"),
        ("mamba2_chunk_state", MAMBA2_CHUNK_STATE, {"tile_n": 32}, "64-column"),
        ("mamba2_chunk_scan", MAMBA2_CHUNK_SCAN, {"tile_p": 32}, "64-column"),
        ("mamba2_chunk_scan", MAMBA2_CHUNK_SCAN, {"warp_specialized": False}, "trip counts"),
        ("mamba2_chunk_scan", MAMBA2_CHUNK_SCAN, {"consumer_split": "pingpong"}, "pingpong"),
    ):
        _, sprogram, validity = _build(op, SUITE, {**design, **change})
        assert not validity.ok and reason in (unsupported(sprogram, DEVICE) or ""), change
        assert validity.rejections[0].detail.startswith("codegen: ")


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_sampled_mamba2_schedules_compile_without_spills() -> None:
    sources = []
    workloads = [(op, params) for op in ("mamba2_chunk_state", "mamba2_chunk_scan")
                 for params in (SUITE, GROUPED)]
    workloads += [("mamba2_chunk_state", {**GROUPED, **PASSING, "seq_idx": True}),
                  ("mamba2_chunk_scan", {**GROUPED, **GATED, "seq_idx": True}),
                  ("mamba2_chunk_scan", {**GROUPED, "cb_in_tile": True, "seq_idx": True})]
    for op, params in workloads:
        spec = parse_spec(op, params)
        sources += [render(sp, spec, DEVICE).source
                    for sp in sample_schedules(spec, DEVICE, 3, seed=2026)]
    assert_compile_clean(sources)


def test_chunk_state_with_the_state_passing_walks_every_chunk_of_its_head() -> None:
    """pass_states: one tile per (batch, head, p, n) tile (no chunk axis), its loop over
    every chunk's trips; each chunk's MMA starts afresh, the running state takes it at the
    chunk's last trip and is stored as the next chunk's state; the first chunk's state is
    the initial one, and the last state the epilogue's final_states."""
    spec = parse_spec("mamba2_chunk_state", {**GROUPED, **PASSING})
    for sprogram in sample_schedules(spec, DEVICE, 2, seed=3):
        artifact = render(sprogram, spec, DEVICE)
        source = artifact.source
        assert "TILES_CHUNKS = 1," in source
        assert "constexpr int TRIPS = NCHUNKS * L_TILES;" in source
        assert "for (int trip = 0; trip < TRIPS; ++trip)" in source
        assert "(trip) % L_TILES > 0 || kk > 0" in source
        assert "run[mi][i] = fmaf(decay, run[mi][i], acc[mi][i])" in source
        assert "((trip) + 1) % L_TILES == 0 && (trip) + 1 < TRIPS" in source
        assert "initial_states + " in source
        tensors = {getattr(a, "tensor", a.name) for a in artifact.args}  # maps name theirs
        assert {"final_states", "states", "initial_states"} <= tensors


@pytest.mark.parametrize("extra", [{"z": True}, {"d_per_channel": True}, GATED])
def test_chunk_scan_gates_its_output_and_weights_the_skip_per_channel(extra: dict) -> None:
    """z: the store multiplies each output pair by silu(z) of the same element (z read as
    x is laid out), after the skip term; d_per_channel: D[h, p] of each column, not D[h];
    z comes in as a pointer after D."""
    spec = parse_spec("mamba2_chunk_scan", {**GROUPED, **extra})
    for sprogram in sample_schedules(spec, DEVICE, 2, seed=5):
        artifact = render(sprogram, spec, DEVICE)
        source = artifact.source
        gated = "v0 *= act_silu(zv.x); v1 *= act_silu(zv.y);" in source
        assert gated == bool(extra.get("z"))
        per_channel = "D + heads0 * HEADDIM + p0 + 8 * g + 2 * (lane & 3)" in source
        assert per_channel == bool(extra.get("d_per_channel"))
        assert ("d_h[j] = __ldg(D + heads0 + j)" in source) != per_channel
        names = [a.name for a in artifact.args]
        assert ("z" in names) == bool(extra.get("z"))
        if gated:
            assert names.index("z") == names.index("D") + 1
            assert source.index("acc[mi][4 * g + 2 * h] +=") < source.index("act_silu(zv.x)")


@pytest.mark.parametrize(("op", "extra", "marks"), [
    ("mamba2_chunk_state", {}, ("kept[kk][j]", "s0.x == seq_end && seq_end >= 0")),
    ("mamba2_chunk_state", PASSING, ("kept[kk][j]", "const bool carried = seq_end == seq_run;",
                                     "const float decay = carried ? ", "seq_run = 0;")),
    ("mamba2_chunk_scan", {}, ("seq_before = chunks0 > 0 ? __ldg(seq_chunk - 1) : 0",
                               "const float decay = same ? ")),
])
def test_packed_sequences_mask_what_crosses_a_boundary(op: str, extra: dict,
                                                       marks: tuple[str, ...]) -> None:
    """seq_idx: the chunk state keeps the positions of the sequence its chunk ends in;
    fused with the state passing, a chunk ending in a new sequence carries nothing over;
    the chunk scan's state term is zero on rows of another sequence than the one before
    the chunk. seq_idx comes in as an int pointer; without it none of this is written."""
    for packed in (True, False):
        spec = parse_spec(op, {**GROUPED, **extra, "seq_idx": packed})
        for sprogram in sample_schedules(spec, DEVICE, 2, seed=9):
            artifact = render(sprogram, spec, DEVICE)
            assert all((mark in artifact.source) == packed for mark in marks)
            assert ("const int* __restrict__ seq_idx" in artifact.source
                    or "const int* seq_idx" in artifact.source) == packed


@pytest.mark.parametrize("op", ["mamba2_chunk_state", "mamba2_chunk_scan"])
def test_every_ring_stage_is_released_by_its_last_reader(op: str) -> None:
    """A stage whose last reader is register math (chunk scan's cb, read by scale_cb) is
    released after it, as one read by wgmma is after its wait: else the producer waits for
    an empty slot forever (the first chunk-scan kernels hung on the H200)."""
    spec = parse_spec(op, GROUPED)
    for sprogram in sample_schedules(spec, DEVICE, 6, seed=11):
        lowered = lowering(sprogram, DEVICE)
        for ring in lowered.layout.structure.rings:
            release = "mbarrier_arrive_cluster_warp" if ring.cluster_blocks > 1 else (
                "mbarrier_arrive_warp")
            arrival = f"{release}({ring.empty_name}(smem"
            assert arrival in lowered.source, (ring.stream, ring.last_reader, sprogram.choices)


@pytest.mark.parametrize("op", ["mamba2_chunk_state", "mamba2_chunk_scan"])
def test_a_warp_releases_a_slot_only_after_all_its_lanes_have_read_it(op: str) -> None:
    """Every consumer release converges the warp before lane 0 arrives: the chunk scan's
    math diverges lanes, and a bare ``if (lane == 0) arrive`` let the producer's next TMA
    load land under a lane still reading the slot (packed chunk-scan kernels gave a wrong
    tile in 1 run of 5 on the H200; with the __syncwarp, 0 of 40)."""
    spec = parse_spec(op, GROUPED)
    for sprogram in sample_schedules(spec, DEVICE, 6, seed=11):
        source = lowering(sprogram, DEVICE).source
        bare = re.findall(r"if \(lane == 0\) mbarrier_arrive\((?!bar\))", source)
        assert not bare, sprogram.choices
        # In a cluster, lane i arrives on block i's barrier, after the same __syncwarp.
        clustered = sprogram.cluster is not None
        release, arrive = (("mbarrier_arrive_cluster_warp", "mbarrier_arrive_cluster(bar")
                           if clustered else ("mbarrier_arrive_warp", "mbarrier_arrive(bar)"))
        assert f"{release}(" in source
        body = source[source.index(f"void {release}("):]
        assert body.index("__syncwarp();") < body.index(arrive)


def test_chunk_state_packs_heads_of_a_group_into_its_rows() -> None:
    """tile_g heads of one B group stacked in a tile's rows: x boxes span the packed heads,
    dt / dA boxes hold each head's positions in turn, the grid has nheads / g head tiles,
    and each m64 block scales x by its own head's decay."""
    params = {**SUITE, "ngroups": 8}  # groups of 10 heads: packs of 2 divide them
    spec, sprogram, validity = _build(
        "mamba2_chunk_state", params,
        {**MAMBA2_CHUNK_STATE, "tile_g": 2, "tile_p": 128, "tile_l": 64})
    assert validity.ok, validity
    art = render(sprogram, spec, DEVICE)
    maps = {a.name: a for a in art.args if a.kind == "tensor_map"}
    assert maps["x_map"].box_dims == (64, 2, 64) and maps["dt_map"].box_dims == (64, 1, 2)
    assert art.grid == (40 * 16 * 8, 1, 1)
    src = art.source
    assert "constexpr int PACK = 2, HEAD_ROWS = 64" in src
    assert "swizzle_128b((l * PACK + head) * 128" in src and "w[mi][kk][h]" in src
    _, unpacked, validity = _build("mamba2_chunk_state", params,
                                   {**MAMBA2_CHUNK_STATE, "tile_g": 2, "tile_p": 64})
    assert not validity.ok and "packs whole heads" in (unsupported(unpacked, DEVICE) or "")
