"""sPrograms: Append / Wait, planning from choices, check_valid and canonical JSON.

Expectations come from docs/architecture.md ("The model"), the hardware rules quoted in
``scheduler_search/sprogram/validate.py`` (PTX ISA for wgmma and setmaxnreg, the CUDA
driver API for TMA boxes) and the hand-written kernels the space must contain: the
warp-specialised TMA + wgmma GEMM (one producer, two consumer warpgroups) and
FlashAttention-3's forward plan. Byte and register counts are derived here from tile
shapes, never copied from the code's output.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pickle
import random
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from scheduler_search.hardware import A100_SXM, H200, Device, UnitKind
from scheduler_search.ops import OperatorSpec, parse_spec
from scheduler_search.ops.suites import REFERENCE_WORKLOADS
from scheduler_search.space import ScheduleSpace
from scheduler_search.space.designs import FLASH_ATTENTION_3 as FA3
from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED as GEMM_WS
from scheduler_search.sprogram import (
    Raster,
    RejectReason,
    ScheduleError,
    SProgram,
    SProgramBuilder,
    Validity,
    WarpRoles,
    check_valid,
    plan_sprogram,
    resolve_choices,
)

SUITE: dict[str, dict[str, Any]] = REFERENCE_WORKLOADS
GEMM = SUITE["gemm"]
ATTENTION = SUITE["attention"]
MAMBA2 = {k: v for k, v in SUITE["mamba2_chunk_scan"].items() if k != "dtype"}
OPS = tuple(SUITE)

#: FlashAttention-3's forward plan (Shah et al. 2024): 128x128 tiles, a producer warp,
#: two consumer warpgroups taking turns on the tensor cores, QK of the next iteration


@cache
def suite_spec(op: str) -> OperatorSpec:
    return parse_spec(op, SUITE[op])


class SeededTrial:
    """A stand-in for an Optuna trial: picks each categorical option at random."""

    def __init__(self, seed: int | str) -> None:
        self.rng = random.Random(seed)

    def suggest_categorical(self, name: str, choices: list[Any]) -> Any:
        del name
        return self.rng.choice(choices)


DEVICES = {"h200": H200, "a100": A100_SXM}


@cache
def sampled_sprograms(op: str, device_name: str, count: int = 24) -> tuple[SProgram, ...]:
    """``count`` distinct planned sPrograms of ``op``'s space (valid or not), seeded."""
    spec = suite_spec(op)
    device = DEVICES[device_name]
    space = ScheduleSpace(spec, device)
    trial = SeededTrial(f"{op}:{device_name}")
    found: dict[str, SProgram] = {}
    for _ in range(50 * count):
        sprogram = plan_sprogram(spec, device, space.suggest(trial))
        found.setdefault(sprogram.hash, sprogram)
        if len(found) == count:
            break
    return tuple(found.values())


def rejections(validity: Validity, reason: RejectReason) -> list[str]:
    return [r.detail for r in validity.rejections if r.reason is reason]


def validity_of(spec: OperatorSpec, choices: dict[str, Any], device: Device = H200) -> Validity:
    return check_valid(plan_sprogram(spec, device, choices), spec, device)


# ----- check_valid ----------------------------------------------------------------------

GEMM_SPEC = parse_spec("gemm", GEMM)
WS2 = {"warp_specialized": True, "consumer_warpgroups": 2, "consumer_split": "cooperative"}


def test_six_stages_of_256x256x64_tiles_exceed_shared_memory() -> None:
    choices = {"tile_m": 256, "tile_n": 256, "tile_k": 64, "stages_ab": 6, **WS2}
    validity = validity_of(GEMM_SPEC, choices)
    # Each stage holds a 256x64 tile of a and a 64x256 tile of b, 2 bytes per element.
    operand_bytes = 6 * (256 * 64 + 64 * 256) * 2
    assert operand_bytes > H200.smem_per_block_bytes
    assert validity.smem_bytes >= operand_bytes
    assert validity.reason is RejectReason.SMEM
    (detail,) = rejections(validity, RejectReason.SMEM)
    assert f"{validity.smem_bytes} B" in detail
    assert f"{H200.smem_per_block_bytes} B" in detail


def test_a_256x256_tile_over_two_cooperative_consumers_exceeds_registers() -> None:
    choices = {"tile_m": 256, "tile_n": 256, "tile_k": 64, "stages_ab": 3, **WS2}
    validity = validity_of(GEMM_SPEC, choices)
    # Each consumer warpgroup owns 128 rows of the fp32 accumulator: 128x256x4 bytes over
    # 128 threads of 4-byte registers is 256 registers per thread for the accumulator
    # alone, more than setmaxnreg allows (at most 256) once anything else is live.
    accumulator_regs = 128 * 256 * 4 // (128 * 4)
    assert accumulator_regs == 256
    assert validity.consumer_regs_needed > accumulator_regs
    assert [r.reason for r in validity.rejections] == [RejectReason.REGISTERS]
    (detail,) = rejections(validity, RejectReason.REGISTERS)
    assert str(validity.consumer_regs_needed) in detail
    budget = int(detail.rsplit("budget", 1)[1])
    assert budget < validity.consumer_regs_needed
    assert budget <= 256 and budget % 8 == 0


def test_the_same_tile_fits_with_one_more_warpgroup_sharing_rows() -> None:
    """Control for the register case: 128 rows per consumer fit."""
    choices = {"tile_m": 128, "tile_n": 256, "tile_k": 64, "stages_ab": 3, **WS2}
    assert validity_of(GEMM_SPEC, choices).ok


def test_64_rows_over_two_cooperative_consumers_break_the_wgmma_shape() -> None:
    choices = {"tile_m": 64, "tile_n": 128, "tile_k": 64, "stages_ab": 3, **WS2}
    validity = validity_of(GEMM_SPEC, choices)
    details = rejections(validity, RejectReason.WGMMA_SHAPE)
    # wgmma is m64nNk16: 64 rows split over two warpgroups leaves 32 per warpgroup.
    assert details and "M=32" in details[0]
    pingpong = validity_of(GEMM_SPEC, {**choices, "consumer_split": "pingpong"})
    assert not rejections(pingpong, RejectReason.WGMMA_SHAPE)


def test_tma_store_of_rows_that_are_not_16_byte_aligned_is_rejected() -> None:
    # b stored (n, k): TMA loads need k aligned only, but the TMA store writes rows of n.
    spec = parse_spec("gemm", {**GEMM, "n": 4100, "b_layout": "nk"})
    choices = {"tile_m": 128, "tile_n": 128, "tile_k": 64, "stages_ab": 3, **WS2}
    validity = validity_of(spec, {**choices, "map_store": "tma"})
    details = rejections(validity, RejectReason.TMA_BOX)
    assert details and f"{4100 * 2}-byte" in details[0]
    assert validity_of(spec, {**choices, "map_store": "cuda_core"}).ok


def test_tma_box_of_a_1d_tile_under_16_bytes_is_rejected() -> None:
    spec = suite_spec("mamba2_chunk_state")
    # dt and dA are fp32: a chunk tile of 2 steps is an 8-byte box.
    choices = {"tile_p": 64, "tile_n": 64, "tile_l": 2, "warp_specialized": True}
    validity = validity_of(spec, {**choices, "map_vector_loads": "tma"})
    details = rejections(validity, RejectReason.TMA_BOX)
    assert {d.split(":")[0] for d in details} == {"load_dt", "load_dA"}
    assert all("8 B" in d for d in details)
    by_threads = validity_of(spec, {**choices, "map_vector_loads": "cuda_core"})
    assert not rejections(by_threads, RejectReason.TMA_BOX)


def test_stages_deeper_than_the_loop_are_rejected_unless_the_block_is_persistent() -> None:
    """A persistent block's ring runs on into its next tile: deeper rings keep more loads
    in flight (the chunk state's 4 trips a tile)."""
    spec = parse_spec("gemm", {**GEMM, "k": 128})
    choices = {"tile_m": 128, "tile_n": 128, "tile_k": 64, **WS2, "persistent": False}
    validity = validity_of(spec, {**choices, "stages_ab": 3})
    assert validity.reason is RejectReason.STAGES
    assert "2 loop iterations" in rejections(validity, RejectReason.STAGES)[0]
    assert validity_of(spec, {**choices, "stages_ab": 2}).ok
    assert validity_of(spec, {**choices, "stages_ab": 3, "persistent": True}).ok


def test_a_persistent_tma_store_stages_sub_tiles_one_swizzle_span_wide() -> None:
    """As the code generator does: 64 columns of 16-bit or 32 of fp32 states, two slots."""
    pairs = {"tile_p": 128, "tile_n": 128, "tile_l": 64, "tile_g": 2, "warp_specialized": True,
             "consumer_warpgroups": 2, "persistent": True, "map_store": "tma",
             "map_vector_loads": "tma", "stages_xb": 4}
    sizes = {}
    for in_fp32 in (True, False):
        spec = parse_spec("mamba2_chunk_state", {**suite_spec("mamba2_chunk_state").params(),
                                                 "states_in_fp32": in_fp32})
        sizes[in_fp32] = validity_of(spec, pairs).smem_bytes
    assert sizes[True] == sizes[False]  # 128 rows x 128 bytes x 2 either way


def test_pingpong_needs_two_consumer_warpgroups() -> None:
    choices = {"tile_m": 128, "tile_n": 128, "tile_k": 64, "stages_ab": 3}
    one = {**choices, "warp_specialized": True, "consumer_warpgroups": 1}
    validity = validity_of(GEMM_SPEC, {**one, "consumer_split": "pingpong"})
    assert validity.reason is RejectReason.UNSUPPORTED
    assert "pingpong" in validity.rejections[0].detail


def test_a100_specialises_warps_with_cp_async_but_never_overlaps() -> None:
    """A producer warpgroup issues cp.async on sm_80 (an even register share a thread);
    a GPU with neither TMA nor cp.async has none; no sm_80 order overlaps MMAs."""
    from dataclasses import replace

    from scheduler_search.hardware.model import Capabilities

    choices = {"tile_m": 128, "tile_n": 128, "tile_k": 64, "stages_ab": 3}
    ws = validity_of(GEMM_SPEC, {**choices, "warp_specialized": True}, A100_SXM)
    assert ws.ok, ws.rejections
    bare = replace(A100_SXM, capabilities=Capabilities(mma_sync=True))
    no_copies = validity_of(GEMM_SPEC, {**choices, "warp_specialized": True}, bare)
    assert [r.reason for r in no_copies.rejections] == [RejectReason.UNSUPPORTED]
    assert "TMA or cp.async" in no_copies.rejections[0].detail
    overlap = {**choices, "warp_specialized": False, "order": "overlap"}
    assert validity_of(GEMM_SPEC, overlap, A100_SXM).reason is RejectReason.UNSUPPORTED
    plain = {**choices, "warp_specialized": False, "consumer_warpgroups": 1}
    assert validity_of(GEMM_SPEC, plain, A100_SXM).ok


def test_threads_and_register_split_limits() -> None:
    choices = {"tile_m": 128, "tile_n": 128, "tile_k": 64, "stages_ab": 3}
    # One producer warpgroup and eight consumers: 1152 threads > 1024 per block.
    wide = validity_of(GEMM_SPEC, {**choices, "warp_specialized": True, "consumer_warpgroups": 8})
    assert RejectReason.THREADS in {r.reason for r in wide.rejections}
    # setmaxnreg cannot go below 24 registers per thread.
    starved = {**choices, "warp_specialized": True, "consumer_warpgroups": 1, "producer_regs": 16}
    assert validity_of(GEMM_SPEC, starved).reason is RejectReason.REGISTER_SPLIT


def test_a_tile_that_straddles_a_chunk_is_rejected() -> None:
    spec = suite_spec("mamba2_chunk_state")
    validity = validity_of(spec, {"tile_p": 64, "tile_n": 64, "tile_l": 96})
    assert validity.reason is RejectReason.TILE_SHAPE
    assert "does not divide" in validity.rejections[0].detail


def test_a_negative_tile_is_rejected_with_a_reason() -> None:
    choices = {"tile_m": -64, "tile_n": 128, "tile_k": 64}
    validity = check_valid(resolve_choices(GEMM_SPEC, H200, choices), GEMM_SPEC, H200)
    assert validity.reason is RejectReason.TILE_SHAPE


def test_a_zero_tile_is_rejected_with_a_reason() -> None:
    choices = {"tile_m": 0, "tile_n": 128, "tile_k": 64}
    validity = check_valid(resolve_choices(GEMM_SPEC, H200, choices), GEMM_SPEC, H200)
    assert validity.reason is RejectReason.TILE_SHAPE


def test_zero_consumer_warpgroups_is_a_schedule_error() -> None:
    with pytest.raises(ScheduleError, match="consumer_warpgroups"):
        resolve_choices(GEMM_SPEC, H200, {"consumer_warpgroups": 0})


@pytest.mark.parametrize("op", OPS)
def test_check_valid_reads_decisions_as_it_reads_the_sprogram(op: str) -> None:
    """The space rejects from the resolved choices without emitting the sProgram."""
    spec = suite_spec(op)
    for sprogram in sampled_sprograms(op, "h200")[:12]:
        decided = resolve_choices(spec, H200, sprogram.choices)
        assert check_valid(decided, spec, H200) == check_valid(sprogram, spec, H200)


# ----- the hand-written designs ---------------------------------------------------------


def test_warp_specialised_gemm_sprogram() -> None:
    sprogram = plan_sprogram(GEMM_SPEC, H200, GEMM_WS)
    assert check_valid(sprogram, GEMM_SPEC, H200).ok
    roles = sprogram.roles
    assert (roles.warp_specialized, roles.producer_warps, roles.consumer_warpgroups) == (
        True,
        1,
        2,
    )
    assert roles.threads == 3 * 128
    assert roles.registers_per_block() <= H200.regs_per_sm

    producer = [(unit, op.stask) for unit, op in sprogram.role_stream("producer")]
    assert producer == [(UnitKind.TMA, "load_a"), (UnitKind.TMA, "load_b")]
    for role in ("consumer0", "consumer1"):
        stream = [(unit, op.stask) for unit, op in sprogram.role_stream(role)]
        assert (UnitKind.TENSOR_CORE, "mma") in stream
        assert all(name not in ("load_a", "load_b") for _, name in stream)

    full = {b.name: b for b in sprogram.barriers}
    assert full["ab_full"].kind == "stage" and full["ab_full"].slots == 4
    assert full["ab_full"].waiter == "mma"
    assert set(full["ab_full"].deps) == {("load_a", 0), ("load_b", 0)}
    # The producer refills a slot once the mma of 4 iterations ago has read it.
    empty = full["ab_empty"]
    assert (empty.kind, empty.slots, empty.role, empty.waiter) == (
        "stage",
        4,
        "producer",
        "load_a",
    )
    assert empty.deps == (("mma", 4),)


def test_overlapped_gemm_keeps_one_wgmma_group_in_flight() -> None:
    sprogram = plan_sprogram(GEMM_SPEC, H200, GEMM_WS)
    # The loop's only MMA is its last sTask: overlap waits for it one iteration late.
    assert all(op.lead == 0 for ops in sprogram.programs.values() for op in ops)
    inflight = [b for b in sprogram.barriers if b.kind == "mma_wait" and b.waiter == "mma"]
    assert [b.deps for b in inflight] == [(("mma", 1),)]
    serial = plan_sprogram(GEMM_SPEC, H200, {**GEMM_WS, "order": "serial"})
    assert not [b for b in serial.barriers if b.kind == "mma_wait"]


def fa3_sprogram() -> SProgram:
    return plan_sprogram(suite_spec("attention"), H200, FA3)


def test_fa3_plan_is_valid() -> None:
    validity = check_valid(fa3_sprogram(), suite_spec("attention"), H200)
    assert validity.ok, validity.rejections


def test_fa3_loads_q_once_and_streams_k_and_v_through_their_own_rings() -> None:
    sprogram = fa3_sprogram()
    producer = [(unit, op.stask) for unit, op in sprogram.role_stream("producer")]
    assert producer == [
        (UnitKind.TMA, "load_q"),
        (UnitKind.TMA, "load_k"),
        (UnitKind.TMA, "load_v"),
    ]
    graph = suite_spec("attention").graph(sprogram.tile)
    assert graph.stask("load_q").phase == "prologue"
    assert {graph.stask(n).phase for n in ("load_k", "load_v")} == {"loop"}
    assert sprogram.stream_of("load_q") is None
    assert sprogram.streams == {"k": ("load_k",), "v": ("load_v",)}
    barriers = {b.name: b for b in sprogram.barriers}
    assert barriers["load_q_full"].slots == 1
    assert barriers["load_q_full"].deps == (("load_q", 0),)
    for stream, reader in (("k", "mma_qk"), ("v", "mma_pv")):
        full, empty = barriers[f"{stream}_full"], barriers[f"{stream}_empty"]
        assert (full.waiter, full.slots, full.deps) == (reader, 2, ((f"load_{stream}", 0),))
        assert (empty.waiter, empty.role, empty.slots) == (f"load_{stream}", "producer", 2)
        assert empty.deps == ((reader, 2),)


def test_fa3_q_takes_one_buffer_while_k_and_v_take_one_per_stage() -> None:
    spec = suite_spec("attention")
    tile_bytes = 128 * 128 * 2  # a 128-row tile of head_dim 128 in fp16
    base = check_valid(fa3_sprogram(), spec, H200).smem_bytes
    deeper = validity_of(spec, {**FA3, "stages_k": 3, "stages_v": 3})
    # One more stage of k and of v: two tiles and two pairs of mbarriers more, q unchanged.
    assert deeper.smem_bytes - base in range(2 * tile_bytes, 2 * tile_bytes + 64)
    assert base >= (1 + 2 + 2) * tile_bytes


def test_fa3_issues_the_next_qk_and_this_pv_back_to_back() -> None:
    sprogram = fa3_sprogram()
    for role in ("consumer0", "consumer1"):
        stream = [op for _, op in sprogram.role_stream(role) if op.stask.startswith(("mma", "soft",
                                                                                     "resc"))]
        by_name = {op.stask: op for op in stream}
        # mma_qk(t+1), mma_pv(t), then the softmax and rescale of trip t+1.
        assert [op.stask for op in stream][:2] == ["mma_qk", "mma_pv"]
        assert by_name["mma_pv"].lead == 0
        assert all(op.lead == 1 for op in stream if op.stask != "mma_pv")
    overlap = plan_sprogram(suite_spec("attention"), H200, {**FA3, "order": "overlap"})
    stream = [op for _, op in overlap.role_stream("consumer0")]
    by_name = {op.stask: op for op in stream}
    assert by_name["mma_qk"].lead == 1
    assert all(op.lead == 0 for op in stream if op.stask != "mma_qk")
    assert by_name["mma_qk"].step < by_name["softmax_max"].step < by_name["mma_pv"].step
    units = {u: [op.stask for op in ops] for u, ops in sprogram.programs.items()}
    assert units[UnitKind.TENSOR_CORE].count("mma_qk") == 2
    assert "softmax_exp2" in units[UnitKind.SFU]
    serial = plan_sprogram(suite_spec("attention"), H200, {**FA3, "order": "serial"})
    assert all(op.lead == 0 for ops in serial.programs.values() for op in ops)


def test_fa3_consumers_take_turns_on_the_tensor_cores() -> None:
    sprogram = fa3_sprogram()
    named = [b for b in sprogram.barriers if b.kind == "turn"]
    assert named, "alternate needs a named barrier between the consumer warpgroups"
    turn = next(b for b in named if b.role == "consumer1")
    # consumer1 starts its QK once consumer0 has issued its PV of the same iteration.
    assert turn.waiter == "mma_qk" and turn.deps == (("mma_pv", 0),)
    free = plan_sprogram(suite_spec("attention"), H200, {**FA3, "wg_schedule": "free"})
    assert not [b for b in free.barriers if b.kind == "turn"]


def test_every_fa3_consumer_waits_for_its_turn() -> None:
    named = [b for b in fa3_sprogram().barriers if b.kind == "turn"]
    assert {b.role for b in named} == {"consumer0", "consumer1"}


# ----- Append and Wait ------------------------------------------------------------------


def gemm_graph():
    return GEMM_SPEC.graph({"m": 128, "n": 128, "k": 64})


def built(builder: SProgramBuilder) -> SProgram:
    roles = WarpRoles(True, 1, 2, 40, 232)
    return builder.build(
        params=GEMM_SPEC.params(),
        roles=roles,
        streams={"ab": ("load_a", "load_b")},
        stages={"ab": 2},
        order="serial",
        consumer_split="cooperative",
        raster=Raster("m"),
        persistent=False,
        choices={},
    )


GEMM_MAPPING = {
    "load_a": UnitKind.TMA,
    "load_b": UnitKind.TMA,
    "mma": UnitKind.TENSOR_CORE,
    "store": UnitKind.TMA,
}


@pytest.mark.parametrize(
    ("change", "device", "words"),
    [
        ({"mma": UnitKind.CUDA_CORE}, H200, "cannot run on cuda_core"),
        ({"load_a": UnitKind.SFU}, H200, "cannot run on sfu"),
        ({"store": UnitKind.TENSOR_CORE}, H200, "cannot run on tensor_core"),
        ({}, A100_SXM, "has no tma unit"),
    ],
    ids=["mma_on_cuda_cores", "load_on_sfu", "store_on_tensor_core", "tma_on_a100"],
)
def test_append_refuses_an_seu_that_cannot_run_the_stask(
    change: dict[str, UnitKind], device: Device, words: str
) -> None:
    with pytest.raises(ScheduleError, match=words):
        SProgramBuilder(gemm_graph(), device, {**GEMM_MAPPING, **change})


def test_every_stask_needs_an_seu() -> None:
    mapping = {k: v for k, v in GEMM_MAPPING.items() if k != "store"}
    with pytest.raises(ScheduleError, match="store"):
        SProgramBuilder(gemm_graph(), H200, mapping)


def test_append_puts_the_stask_on_its_seu_with_steps_per_role() -> None:
    builder = SProgramBuilder(gemm_graph(), H200, GEMM_MAPPING)
    ops = [
        builder.append("load_a", role="producer"),
        builder.append("mma", role="consumer0"),
        builder.append("load_b", role="producer"),
        builder.append("mma", role="consumer1", lead=1),
        builder.append("store", role="consumer0"),
    ]
    assert [(op.role, op.step) for op in ops] == [
        ("producer", 0),
        ("consumer0", 0),
        ("producer", 1),
        ("consumer1", 0),
        ("consumer0", 1),
    ]
    assert ops[3].lead == 1
    programs = built(builder).programs
    assert [op.stask for op in programs[UnitKind.TMA]] == ["load_a", "load_b", "store"]
    assert [op.role for op in programs[UnitKind.TENSOR_CORE]] == ["consumer0", "consumer1"]


@pytest.mark.parametrize(
    ("deps", "words"),
    [
        ([("load_c", 0)], "unknown sTask load_c"),
        ([("load_a", 0), ("nope", 1)], "unknown sTask nope"),
        ([("mma", -1)], "future iteration"),
    ],
)
def test_wait_refuses_unknown_stasks_and_future_iterations(
    deps: list[tuple[str, int]], words: str
) -> None:
    builder = SProgramBuilder(gemm_graph(), H200, GEMM_MAPPING)
    with pytest.raises(ScheduleError, match=words):
        builder.wait("mma", deps, name="bad")


def test_wait_records_a_barrier_stask() -> None:
    builder = SProgramBuilder(gemm_graph(), H200, GEMM_MAPPING)
    barrier = builder.wait("load_a", [("mma", 3)], name="ring", slots=3, role="producer")
    assert (barrier.waiter, barrier.deps, barrier.slots, barrier.role) == (
        "load_a",
        (("mma", 3),),
        3,
        "producer",
    )
    assert built(builder).barriers == (barrier,)


def test_append_of_an_unknown_stask_is_a_schedule_error() -> None:
    builder = SProgramBuilder(gemm_graph(), H200, GEMM_MAPPING)
    with pytest.raises(ScheduleError):
        builder.append("load_c", role="producer")


def test_wait_before_an_unknown_stask_is_a_schedule_error() -> None:
    builder = SProgramBuilder(gemm_graph(), H200, GEMM_MAPPING)
    with pytest.raises(ScheduleError):
        builder.wait("load_c", [("mma", 1)], name="bad")


@pytest.mark.parametrize("device_name", DEVICES)
@pytest.mark.parametrize("op", OPS)
def test_emitted_sprograms_are_well_formed(op: str, device_name: str) -> None:
    """Every sTask instance sits on its mapped sEU; steps count 0, 1, 2 ... per role;
    barriers name graph sTasks at non-negative distances; every sTask is issued."""
    spec = suite_spec(op)
    for sprogram in sampled_sprograms(op, device_name):
        graph = spec.graph(sprogram.tile)
        names = set(graph.names())
        issued = set()
        for unit, ops in sprogram.programs.items():
            for op_ in ops:
                assert sprogram.mapping[op_.stask] is unit
                assert unit in graph.stask(op_.stask).units
                issued.add(op_.stask)
        assert issued == names
        roles = {op_.role for ops in sprogram.programs.values() for op_ in ops}
        expected = set(sprogram.roles.consumer_roles)
        if sprogram.roles.warp_specialized:
            expected.add("producer")
        assert roles == expected
        for role in roles:
            steps = [op_.step for _, op_ in sprogram.role_stream(role)]
            assert steps == list(range(len(steps)))
        for barrier in sprogram.barriers:
            assert barrier.waiter in names
            assert all(dep in names and distance >= 0 for dep, distance in barrier.deps)
            assert barrier.slots >= 1
        for stream, depth in sprogram.stages.items():
            rings = [b for b in sprogram.barriers if b.name.startswith(f"{stream}_")]
            assert all(b.slots == depth for b in rings)


# ----- resolve_choices ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("choices", "words"),
    [
        ({"tile_x": 64}, "unknown axes"),
        ({"map_load_c": "tma"}, "no sTask 'load_c'"),
        ({"map_mma": "cuda_core"}, "cannot run on cuda_core"),
        ({"order": "backwards"}, "order"),
        ({"consumer_warpgroups": 2, "consumer_split": "shared"}, "consumer_split"),
        ({"stages_xy": 2}, "no operand stream 'xy'"),
        ({"raster_major": "k"}, "raster_major"),
    ],
)
def test_resolve_choices_names_the_bad_choice(choices: dict[str, Any], words: str) -> None:
    with pytest.raises(ScheduleError, match=words):
        resolve_choices(GEMM_SPEC, H200, {"tile_m": 128, "tile_n": 128, "tile_k": 64, **choices})


def test_defaults_follow_the_architecture() -> None:
    hopper = plan_sprogram(GEMM_SPEC, H200, {})
    assert hopper.roles.warp_specialized and hopper.roles.consumer_warpgroups == 2
    assert hopper.mapping["load_a"] is UnitKind.TMA
    ampere = plan_sprogram(GEMM_SPEC, A100_SXM, {})
    assert not ampere.roles.warp_specialized and ampere.roles.consumer_warpgroups == 1
    assert ampere.mapping["load_a"] is UnitKind.LSU
    assert ampere.arch == "sm_80" and hopper.arch == "sm_90a"


# ----- canonical JSON and the hash ------------------------------------------------------


@pytest.mark.parametrize("device_name", DEVICES)
@pytest.mark.parametrize("op", OPS)
def test_json_round_trip(op: str, device_name: str) -> None:
    programs = [*sampled_sprograms(op, device_name)]
    if op == "attention" and device_name == "h200":
        programs.append(fa3_sprogram())
    if op == "gemm" and device_name == "h200":
        programs.append(plan_sprogram(GEMM_SPEC, H200, GEMM_WS))
    assert any(p.barriers for p in programs)
    for sprogram in programs:
        text = sprogram.to_json()
        back = SProgram.from_json(text)
        assert back == sprogram
        assert back.to_json() == text
        assert back.hash == sprogram.hash
        assert SProgram.from_dict(sprogram.to_dict()) == sprogram


def test_round_trip_keeps_barriers_lead_ops_and_roles() -> None:
    back = SProgram.from_json(fa3_sprogram().to_json())
    assert any(op.lead == 1 for op in back.programs[UnitKind.TENSOR_CORE])
    assert {b.kind for b in back.barriers} == {"stage", "turn", "mma_wait"}
    assert all(isinstance(d, tuple) for b in back.barriers for d in b.deps)
    assert all(isinstance(u, UnitKind) for u in back.programs)
    assert all(isinstance(u, UnitKind) for u in back.mapping.values())


def test_json_is_canonical_and_the_hash_is_its_sha256() -> None:
    sprogram = fa3_sprogram()
    text = sprogram.to_json()
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    assert " " not in text and "\n" not in text
    assert sprogram.hash == hashlib.sha256(text.encode()).hexdigest()
    data = json.loads(text)
    assert data["version"] == 1
    assert data["mapping"]["load_q"] == "tma"
    assert set(data["programs"]) == {"tma", "tensor_core", "cuda_core", "sfu"}


def test_same_choices_give_byte_identical_json() -> None:
    spec = suite_spec("attention")
    shuffled = dict(reversed(list(FA3.items())))
    first, second = plan_sprogram(spec, H200, FA3), plan_sprogram(spec, H200, shuffled)
    assert first.to_json() == second.to_json()
    assert first.hash == second.hash


@pytest.mark.parametrize("op", OPS)
def test_different_choices_give_different_hashes(op: str) -> None:
    programs = sampled_sprograms(op, "h200")
    choices = {json.dumps(p.choices, sort_keys=True) for p in programs}
    assert len({p.hash for p in programs}) == len(choices) == len(programs)


def test_one_knob_changes_the_hash() -> None:
    base = plan_sprogram(GEMM_SPEC, H200, GEMM_WS)
    for key, value in [("stages_ab", 3), ("raster_swizzle", 8), ("persistent", False)]:
        assert plan_sprogram(GEMM_SPEC, H200, {**GEMM_WS, key: value}).hash != base.hash
    other_workload = parse_spec("gemm", {**GEMM, "k": 8192})
    assert plan_sprogram(other_workload, H200, GEMM_WS).hash != base.hash


def test_the_hash_is_computed_once_per_sprogram(monkeypatch: pytest.MonkeyPatch) -> None:
    sprogram = plan_sprogram(GEMM_SPEC, H200, GEMM_WS)
    serialised = []
    to_json = SProgram.to_json
    monkeypatch.setattr(SProgram, "to_json", lambda self: serialised.append(1) or to_json(self))
    digest = sprogram.hash
    assert [sprogram.hash for _ in range(5)] == [digest] * 5 and len(serialised) == 1
    # The cached value is no field: equality, the dict and a fresh build ignore it.
    rebuilt = SProgram.from_dict(sprogram.to_dict())
    assert rebuilt == sprogram and "hash" not in sprogram.to_dict()
    assert rebuilt.hash == digest and len(serialised) == 2
    # Pickling (to a worker or the seed process) keeps it; a changed copy has its own.
    back = pickle.loads(pickle.dumps(sprogram))
    assert back == sprogram and back.hash == digest and len(serialised) == 2
    changed = dataclasses.replace(sprogram, persistent=not sprogram.persistent)
    assert changed.hash != digest and len(serialised) == 3


@pytest.mark.parametrize("version", [0, 2, None, "1"])
def test_another_schedule_version_is_rejected(version: Any) -> None:
    data = fa3_sprogram().to_dict()
    if version is None:
        del data["version"]
    else:
        data["version"] = version
    with pytest.raises(ValueError, match="version"):
        SProgram.from_dict(data)
    with pytest.raises(ValueError, match="version"):
        SProgram.from_json(json.dumps(data))


def test_hash_is_the_same_in_a_fresh_process() -> None:
    code = (
        "from scheduler_search.hardware import H200\n"
        "from scheduler_search.ops import parse_spec\n"
        "from scheduler_search.sprogram import plan_sprogram\n"
        f"spec = parse_spec('attention', {ATTENTION!r})\n"
        f"print(plan_sprogram(spec, H200, {FA3!r}).hash)\n"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == fa3_sprogram().hash


def test_barrier_kinds_keep_the_spelling_schedules_were_hashed_with() -> None:
    """The kinds have architecture-neutral names in the sProgram; serialised, they keep
    the names they had before (``mbarrier``, ``named``, ``wgmma_wait``), so every
    schedule keeps its sha256, its cache entries and its kernel's name; either spelling
    reads back."""
    sprogram = fa3_sprogram()
    serialised = {b["kind"] for b in sprogram.to_dict()["barriers"]}
    assert serialised == {"mbarrier", "named", "wgmma_wait"}
    neutral = sprogram.to_dict()
    for barrier, kind in zip(neutral["barriers"], sprogram.barriers, strict=True):
        barrier["kind"] = kind.kind.value
    assert SProgram.from_dict(neutral) == sprogram
