"""The two interpreters of a schedule agree: the kernel the skeleton writes has the
sProgram's structure.

For sampled GEMM and attention schedules, the skeleton's own record of what it emitted (each role's
sTasks in issue order with their sEUs, the mbarrier rings and their depths and arrivals,
the tiles loaded once per output tile, the turn barriers, the wgmma waits (an MMA's own
in-flight group, an MMA result read by the CUDA cores), the register budgets) is held
against what the
sProgram says, the same sProgram the cost model's simulator walks. No string matching on
the source.
"""

from __future__ import annotations

import dataclasses
import functools

import pytest
from schedule_samples import sample_schedules

from codegen import Unsupported, lowering, unsupported
from codegen.pipeline import EmissionRecord
from scheduler_search.hardware import get_device
from scheduler_search.hardware.model import UnitKind
from scheduler_search.ops import parse_spec
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED
from scheduler_search.sprogram import SProgram, plan_sprogram

DEVICE = get_device("h200")
SHAPES = ((4096, 4096, 4096, "kn"), (8192, 4096, 14336, "nk"), (4000, 6000, 2000, "kn"),
          (128, 8192, 8192, "nk"))
PER_SHAPE = 40
ATTENTION = (
    {"batch": 1, "heads": 32, "kv_heads": 8, "seq_q": 2048, "seq_kv": 2048, "head_dim": 128,
     "causal": True, "dtype": "float16"},
    {"batch": 2, "heads": 16, "kv_heads": 16, "seq_q": 1000, "seq_kv": 700, "head_dim": 64,
     "causal": False, "dtype": "bfloat16"},
)


#: How many schedules are sampled: the sample itself is drawn when a test first uses it,
#: not when the module is collected (every pytest-xdist worker collects it; drawing it
#: takes seconds).
COUNT = (len(SHAPES) + len(ATTENTION)) * PER_SHAPE


@functools.cache
def _samples() -> list[SProgram]:
    out = []
    for m, n, k, layout in SHAPES:
        spec = GemmSpec(m=m, n=n, k=k, dtype="float16", b_layout=layout)
        out += list(sample_schedules(spec, DEVICE, PER_SHAPE, seed=11))
    for params in ATTENTION:
        out += list(sample_schedules(parse_spec("attention", params), DEVICE, PER_SHAPE, seed=11))
    return out


def _expected_rings(sp: SProgram) -> dict[str, tuple[int, int, str, str]]:
    """stream -> (depth, empty arrivals, full barrier, empty barrier), from the sProgram."""
    rings = {}
    loads = {m for members in sp.streams.values() for m in members
             if sp.mapping[m] is UnitKind.TMA}
    for full in sp.barriers:
        if full.kind != "stage" or not all(d in loads for d, _ in full.deps):
            continue
        stream = sp.stream_of(full.deps[0][0])
        empty = next(b for b in sp.barriers if b.kind == "stage" and b.waiter in loads
                     and sp.stream_of(b.waiter) == stream)
        readers = 1 if sp.consumer_split == "pingpong" else sp.roles.consumer_warpgroups
        # A stage the cluster's blocks multicast into is released by all their readers.
        shared = sp.cluster is not None and bool(set(sp.cluster.multicast) & set(
            d for d, _ in full.deps))
        blocks = sp.cluster.size if shared else 1
        assert full.slots == empty.slots == sp.stages[stream]
        assert empty.deps[0][1] == sp.stages[stream]  # released `depth` trips later
        rings[stream] = (full.slots, 4 * readers * blocks, full.name, empty.name)
    return rings


def _check(sp: SProgram, record: EmissionRecord) -> None:
    roles = (["producer"] if sp.roles.warp_specialized else []) + list(sp.roles.consumer_roles)
    assert sorted(record.roles) == sorted(roles)
    for role in roles:
        expected = [(op.stask, unit) for unit, op in sp.role_stream(role)]
        assert record.sequence(role) == expected, role
    assert {s: (r.depth, r.empty_arrivals, r.full, r.empty) for s, r in record.rings.items()} \
        == _expected_rings(sp)
    named = {b.name: b for b in sp.barriers if b.kind == "turn"}
    assert set(record.turns) == set(named)
    for name, turn in record.turns.items():
        assert turn.waits == named[name].role and turn.stask == named[name].waiter
    ids = sorted(t.barrier_id for t in record.turns.values())
    assert len(set(ids)) == len(ids)  # one named barrier per turn
    waits = [b for b in sp.barriers if b.kind == "mma_wait"]
    inflight = {b.waiter for b in waits if b.deps == ((b.waiter, 1),)}
    mmas = [op.stask for op in sp.programs[UnitKind.TENSOR_CORE] if op.role == "consumer0"]
    assert record.mma_pending == {m: 1 if m in inflight else 0 for m in mmas}
    assert record.result_waits == {b.name: b.deps[0][0] for b in waits
                                   if b.deps != ((b.waiter, 1),)}
    loaded_once = {name for name, unit in sp.mapping.items() if unit is UnitKind.TMA
                   and name.startswith("load_") and sp.stream_of(name) is None}
    once = {b.deps[0][0]: b.name for b in sp.barriers
            if b.kind == "stage" and b.deps[0][0] in loaded_once}
    assert record.tile_buffers == {load: (full, f"{load}_empty") for load, full in once.items()}
    if sp.roles.warp_specialized:
        budgets = {"producer": sp.roles.producer_regs}
        budgets |= {r: sp.roles.consumer_regs for r in sp.roles.consumer_roles}
        assert record.register_budgets == budgets
    else:
        assert record.register_budgets == {}


def test_the_sample_covers_the_structures_of_the_space() -> None:
    kinds = {(sp.roles.warp_specialized, sp.roles.consumer_warpgroups, sp.consumer_split,
              any(b.kind == "turn" for b in sp.barriers),
              any(b.kind == "mma_wait" for b in sp.barriers), sp.mapping["store"], sp.persistent)
             for sp in _samples()}
    assert len(_samples()) == COUNT
    for index in range(len(next(iter(kinds)))):
        assert len({k[index] for k in kinds}) > 1, f"field {index} never varies"


@pytest.mark.parametrize("index", range(COUNT))
def test_emitted_structure_equals_the_sprogram(index: int) -> None:
    sp = _samples()[index]
    _check(sp, lowering(sp, DEVICE).record)


def _design(**choices: object) -> SProgram:
    spec = GemmSpec(m=4096, n=4096, k=4096, dtype="float16", b_layout="kn")
    return plan_sprogram(spec, DEVICE, {**GEMM_WARP_SPECIALIZED, **choices})


def test_a_different_sprogram_gives_a_different_kernel() -> None:
    """Dropping the in-flight wgmma barrier from the sProgram (nothing else) changes the
    kernel: the record says the wgmma group is waited for at once."""
    overlap = _design(order="overlap", stages_ab=4)
    assert lowering(overlap, DEVICE).record.mma_pending == {"mma": 1}
    barriers = tuple(b for b in overlap.barriers if b.kind != "mma_wait")
    serial = dataclasses.replace(overlap, barriers=barriers)
    lowered = lowering(serial, DEVICE)
    assert lowered.record.mma_pending == {"mma": 0}
    assert "wgmma_wait<1>" not in lowered.source
    _check(serial, lowered.record)


def test_ring_depth_comes_from_the_sprogram_stages() -> None:
    sp = _design(stages_ab=2)
    deeper = dataclasses.replace(sp, stages={"ab": 4})
    assert lowering(deeper, DEVICE).record.rings["ab"].depth == 4
    assert "constexpr int AB_STAGES = 4;" in lowering(deeper, DEVICE).source


def test_schedules_the_skeleton_cannot_lower_are_reported() -> None:
    sp = _design()
    led = dataclasses.replace(sp, programs={
        unit: tuple(dataclasses.replace(op, lead=1) if op.stask == "mma" else op for op in ops)
        for unit, ops in sp.programs.items()})
    assert "pipelined loop" in (unsupported(led, DEVICE) or "")
    with pytest.raises(Unsupported, match="pipelined loop"):
        lowering(led, DEVICE)
    stores = sp.programs[UnitKind.TMA]
    on_sfu = dataclasses.replace(sp, programs={
        **sp.programs,
        UnitKind.TMA: tuple(op for op in stores if op.stask != "store"),
        UnitKind.SFU: tuple(op for op in stores if op.stask == "store"),
    })
    assert "no emitter for store on sfu" in (unsupported(on_sfu, DEVICE) or "")
    no_turns = _design(consumer_split="pingpong", wg_schedule="free", tile_m=64)
    assert "take turns" in (unsupported(no_turns, DEVICE) or "")
