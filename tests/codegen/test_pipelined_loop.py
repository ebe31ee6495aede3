"""The software-pipelined loop of an sProgram with lead sTasks, on the CPU: its wgmma group
counts and stage releases follow from the stream, and the rotated attention loop is
written as prologue, steady trips and a last trip."""

from __future__ import annotations

import re

from codegen import lowering
from codegen.pipeline import PipelineStructure
from codegen.pipeline.pipelined import group_waits, is_pipelined, lead_problem, release_points
from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_spec
from scheduler_search.sprogram.plan import plan_sprogram

DEVICE = get_device("h200")
PARAMS = {"batch": 1, "heads": 16, "kv_heads": 16, "seq_q": 1000, "seq_kv": 1000,
          "head_dim": 64, "causal": False, "dtype": "float16"}
CHOICES = {"tile_q": 128, "tile_kv": 128, "warp_specialized": True, "consumer_warpgroups": 2,
           "consumer_split": "cooperative", "wg_schedule": "free", "producer_regs": 24,
           "stages_k": 2, "stages_v": 2, "map_softmax_exp2": "sfu", "map_store": "cuda_core",
           "persistent": True}


def _structure(**change: object) -> PipelineStructure:
    spec = parse_spec("attention", PARAMS)
    return PipelineStructure(plan_sprogram(spec, DEVICE, {**CHOICES, **change}))


def test_serial_loops_are_not_pipelined() -> None:
    assert not is_pipelined(_structure(order="serial"))


def test_rotated_attention_waits_count_the_groups_since() -> None:
    s = _structure(order="rotate")
    assert is_pipelined(s) and lead_problem(s) is None
    waits = {(w.waiter, w.mma): w.pending for w in group_waits(s)}
    # Stream: mma_qk(t+1), mma_pv(t), softmax(t+1)..., rescale(t+1).
    # The softmax of t+1 needs q·kᵀ(t+1): p·v(t), committed after it, may stay in flight.
    assert waits[("softmax_max", "mma_qk")] == 1
    # rescale(t+1) rewrites O and p: p·v(t) must be done, nothing may stay in flight.
    assert waits[("rescale", "mma_pv")] == 0
    # Stages: k of trip t+1 is free at the softmax's wait, v of trip t at rescale's.
    points = release_points(s)
    assert points == {"mma_qk": (2, 0), "mma_pv": (5, 0)}


def test_rotated_loop_is_written_as_prologue_steady_and_last_trip() -> None:
    spec = parse_spec("attention", PARAMS)
    sp = plan_sprogram(spec, DEVICE, {**CHOICES, "order": "rotate"})
    lowered = lowering(sp, DEVICE)
    text = lowered.source
    prologue = text.index("// prologue: the lead sTasks of trip 0")
    steady = text.index("for (int trip = 0; trip < KV_TILES - 1; ++trip)")
    last = text.index("// the last trip: no lead sTasks")
    assert prologue < steady < last
    # q·kᵀ is issued in the prologue and the steady trips, p·v in the steady and last ones.
    assert text.count("wgmma_m64n128k16_f16_bk(s_acc[mi]") == 2
    assert text.count("wgmma_m64n64k16_f16_rs_bmn(o_acc[mi]") == 2
    # The record holds the stream once, as the steady trips issue it.
    consumer = [stask for stask, _ in lowered.record.sequence("consumer0")]
    assert consumer[:3] == ["mma_qk", "mma_pv", "softmax_max"]


def _parts(text: str) -> dict[str, list[str]]:
    """The wgmma commits and waits and the stage releases of each part of the loop."""
    prologue = text.index("// prologue: the lead sTasks of trip 0")
    steady = text.index("for (int trip = 0; trip < KV_TILES - 1; ++trip)")
    last = text.index("// the last trip: no lead sTasks")
    end = text.index("load_q_empty(smem, 0), lane);", last)
    pattern = r"wgmma_wait<\d>|wgmma_commit\(\)|[kv]_empty\(smem"
    return {name: re.findall(pattern, text[a:b]) for name, a, b in (
        ("prologue", prologue, steady), ("steady", steady, last), ("last", last, end))}


def test_prologue_and_last_trip_wait_for_what_they_issued() -> None:
    """The prologue issues q·kᵀ(0) alone and waits for it fully; a steady trip issues
    q·kᵀ(t+1) and p·v(t), lets p·v fly under the softmax (wait<1>), then waits for it before
    rescale rewrites O and p; the last trip issues p·v only, and the drain releases v of
    the last trip (k of every trip was released in the loop)."""
    spec = parse_spec("attention", PARAMS)
    text = lowering(plan_sprogram(spec, DEVICE, {**CHOICES, "order": "rotate"}), DEVICE).source
    parts = _parts(text)
    assert parts["prologue"] == ["wgmma_commit()", "wgmma_wait<0>", "k_empty(smem",
                                 "wgmma_wait<0>"]
    assert parts["steady"] == ["wgmma_commit()", "wgmma_commit()", "wgmma_wait<1>",
                               "k_empty(smem", "wgmma_wait<1>", "wgmma_wait<0>", "v_empty(smem"]
    assert parts["last"][:2] == ["wgmma_commit()", "wgmma_wait<0>"]  # p·v, then the drain
    assert "for (int held = max(KV_TILES - 1, 0); held < KV_TILES; ++held)" in text  # v


def _q_releases(text: str) -> list[tuple[str, str]]:
    """Each arrival on Q's empty barrier: (the loop it is in, its guard), C++ text."""
    found = []
    start = text.index("// prologue: the lead sTasks of trip 0")
    for arrival in re.finditer(r"mbarrier_arrive_warp\(load_q_empty\(smem, 0\), lane\)", text):
        if arrival.start() < start:
            continue
        before = text[start:arrival.start()]
        guard = re.findall(r"if \((.+)\) \{", before)[-1]
        loops = re.findall(r"for \(int (trip|held) = (.+?); \w+ < (.+?); ", before)
        drain = before.rfind("for (int held")
        steady = before.rfind("for (int trip = 0;")
        last = before.rfind("// the last trip")
        loop = ("drain" if drain > max(steady, last) else "steady" if steady > last
                else "prologue" if steady < 0 else "after")
        released = re.findall(r"k_empty\(smem, \(x0 \+ (.+?)\) % K_STAGES\)", before)[-1]
        found.append((loop, guard, loops[-1] if loops else None, released))
    return found


def test_a_rotated_loop_releases_q_once_a_tile_with_its_last_k_stage() -> None:
    """Q's only reader is q·kᵀ: each warp arrives on Q's empty barrier once per tile, at
    the wait that proves the tile's last q·kᵀ done (in the prologue for a one-trip tile,
    in the steady trip that issued it otherwise), never after the loop's drain."""
    spec = parse_spec("attention", PARAMS)
    text = lowering(plan_sprogram(spec, DEVICE, {**CHOICES, "order": "rotate"}), DEVICE).source
    releases = _q_releases(text)
    assert [loop for loop, *_ in releases] == ["prologue", "steady", "drain"]
    # With the K stage of the same trip: the guard is "that trip is the tile's last".
    assert all(guard == f"{k_trip} == KV_TILES - 1" for _, guard, _, k_trip in releases)
    for trips in range(1, 7):
        arrivals = 0
        for loop, guard, header, _ in releases:
            if loop == "prologue":
                arrivals += eval(guard, {}, {"KV_TILES": trips})
            else:
                variable, start, _ = header
                first = eval(start.replace("max(", "max((").replace(", 0)", "), 0)"),
                             {"max": max}, {"KV_TILES": trips})
                stop = trips - 1 if loop == "steady" else trips
                arrivals += sum(eval(guard, {}, {"KV_TILES": trips, variable: t})
                                for t in range(first, stop))
        assert arrivals == 1, trips
