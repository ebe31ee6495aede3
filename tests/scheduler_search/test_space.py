"""Schedule spaces: knob tables, enumeration and its counts, define-by-run sampling,
and ranking by the cost model.

Expectations come from docs/architecture.md ("The model", "Search"): the space is define-by-run (a
knob is asked only when its condition holds), invalid points are rejected with a reason
before anything is compiled, and the hand-written kernels (the warp-specialised TMA +
wgmma GEMM, FlashAttention-3's forward plan) are points of the space.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from knob_counts import count_points

from scheduler_search.cost_model import MeasuredTimings, estimate
from scheduler_search.hardware import A100_SXM, H200, UnitKind
from scheduler_search.ops import OPERATORS, OperatorSpec, parse_spec
from scheduler_search.ops.suites import REFERENCE_WORKLOADS
from scheduler_search.space import Candidate, ScheduleSpace, SpaceCount, knob_table, rank_top
from scheduler_search.space.designs import FLASH_ATTENTION_3 as FA3
from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED as GEMM_WS
from scheduler_search.space.tables import fitted_tile
from scheduler_search.sprogram import RejectReason, check_valid, plan_sprogram

SUITE: dict[str, dict[str, Any]] = REFERENCE_WORKLOADS
GEMM = SUITE["gemm"]
ATTENTION = SUITE["attention"]
MAMBA2 = {k: v for k, v in SUITE["mamba2_chunk_scan"].items() if k != "dtype"}
OPS = tuple(SUITE)
DEVICES = {"h200": H200, "a100": A100_SXM}

#: Rejection reasons each suite space must show (what its tile options run into).
EXPECTED_REASONS = {
    "gemm": {RejectReason.SMEM, RejectReason.REGISTERS, RejectReason.WGMMA_SHAPE},
    "attention": {
        RejectReason.SMEM,
        RejectReason.REGISTERS,
        RejectReason.WGMMA_SHAPE,
        RejectReason.TILE_SHAPE,
    },
    "attention_backward": {RejectReason.SMEM, RejectReason.REGISTERS, RejectReason.WGMMA_SHAPE},
    "mamba2_chunk_scan": {RejectReason.STAGES, RejectReason.TILE_SHAPE, RejectReason.WGMMA_SHAPE},
    "mamba2_chunk_state": {RejectReason.STAGES, RejectReason.TILE_SHAPE, RejectReason.WGMMA_SHAPE},
}


Enumerated = tuple[ScheduleSpace, list[Candidate], SpaceCount]


def suite_spec(op: str) -> OperatorSpec:
    return parse_spec(op, SUITE[op])


#: The GEMM suite space without split-K, stream-K and clusters (1/63 of its 36M points,
#: a walk of seconds, not minutes): what the tests below ask of a space holds there too.
SLICES: dict[str, dict[str, Any]] = {"gemm": {"split_k": 1, "stream_k": 0, "cluster_size": 1}}


@pytest.fixture(scope="module")
def enumerated() -> Iterator[Callable[[str, str], Enumerated]]:
    """``enumerated(op, device)``: the suite space (its slice in ``SLICES``) and its
    enumeration, computed once."""
    done: dict[tuple[str, str], Enumerated] = {}

    def get(op: str, device: str = "h200") -> Enumerated:
        if (op, device) not in done:
            space = ScheduleSpace(suite_spec(op), DEVICES[device], fixed=SLICES.get(op))
            done[op, device] = (space, *space.enumerate())
        return done[op, device]

    yield get
    done.clear()


@pytest.fixture(scope="module")
def candidate_keys(
    enumerated: Callable[..., Enumerated],
) -> Iterator[Callable[[str], set[tuple]]]:
    """``candidate_keys(op)``: the keys of the h200 suite space's candidates, made once."""
    done: dict[str, set[tuple]] = {}

    def get(op: str) -> set[tuple]:
        if op not in done:
            done[op] = {key(c.choices) for c in enumerated(op)[1]}
        return done[op]

    yield get
    done.clear()


def key(choices: dict[str, Any]) -> tuple[tuple[str, str, Any], ...]:
    """The identity of a point's choices (a value's type included: True is not 1)."""
    return tuple(sorted((name, type(value).__name__, value) for name, value in choices.items()))


# ----- knob tables ----------------------------------------------------------------------


@pytest.mark.parametrize("device_name", DEVICES)
@pytest.mark.parametrize("op", OPS)
def test_knob_table_layout(op: str, device_name: str) -> None:
    spec = suite_spec(op)
    knobs = knob_table(spec, DEVICES[device_name])
    names = [k.name for k in knobs]
    assert len(names) == len(set(names))
    tiles = [n for n in names if n.startswith("tile_")]
    assert names[: len(tiles)] == tiles and tiles
    assert set(tiles) <= {f"tile_{a}" for a in spec.graph({}).extents}
    # Tile order over the grid is the only non-structural choice, asked last; heaviest
    # tiles first only where tiles differ (a causal mask), staggered loops only where
    # tiles add to a shared sum in any order (the backward's dq).
    order = ["raster_major", "raster_swizzle"]
    order += ["raster_heaviest_first"] if spec.graph({}).causal_pairs else []
    order += ["raster_stagger"] if spec.graph({}).shared_sums else []
    assert [k.name for k in knobs if not k.structural] == order
    assert names[-len(order):] == order
    assert {f"stages_{s}" for s in type(spec).streams} <= set(names)
    for knob in knobs:
        assert knob.options, knob.name
        assert len(set(map(repr, knob.options))) == len(knob.options)
        assert all(type(o) in (int, bool, str) for o in knob.options), knob.name


def test_hopper_tables_offer_warp_specialisation_overlap_and_seu_choices() -> None:
    knobs = {k.name: k for k in knob_table(suite_spec("attention"), H200)}
    assert set(knobs["warp_specialized"].options) == {True, False}
    assert set(knobs["order"].options) == {"serial", "overlap", "rotate"}
    gemm = {k.name: k for k in knob_table(suite_spec("gemm"), H200)}
    assert set(gemm["order"].options) == {"serial", "overlap"}  # rotate needs two MMAs
    assert set(knobs["consumer_warpgroups"].options) == {1, 2, 3}
    assert set(knobs["map_softmax_exp2"].options) == {"sfu", "cuda_core"}
    assert set(knobs["map_store"].options) == {"tma", "cuda_core"}
    mamba = {k.name: k for k in knob_table(suite_spec("mamba2_chunk_scan"), H200)}
    assert set(mamba["map_vector_loads"].options) == {"tma", "cuda_core"}


def test_query_heads_are_packed_only_in_divisors_of_the_group_in_either_layout() -> None:
    gqa = suite_spec("attention")  # 32 query heads over 8 kv heads: groups of 4
    assert gqa.params()["heads"] // gqa.params()["kv_heads"] == 4
    for layout in ("bshd", "bhsd"):
        spec = parse_spec("attention", {**gqa.params(), "layout": layout})
        knobs = {k.name: k for k in knob_table(spec, H200)}
        assert knobs["tile_g"].options == (1, 2, 4), layout
    mha = parse_spec("attention", {**gqa.params(), "kv_heads": gqa.params()["heads"]})
    assert "tile_g" not in {k.name for k in knob_table(mha, H200)}


@pytest.mark.parametrize("op", OPS)
def test_a100_tables_offer_nothing_sm80_lacks(op: str) -> None:
    """A producer warpgroup (its copies by cp.async) but no setmaxnreg budget to choose,
    no loop orders that overlap asynchronous MMAs, no clusters, no TMA."""
    knobs = {k.name: k for k in knob_table(suite_spec(op), A100_SXM)}
    assert knobs["warp_specialized"].options == (True, False)
    assert "producer_regs" not in knobs and "cluster_size" not in knobs
    assert knobs["order"].options == ("serial",)
    have = {u.kind.value for u in A100_SXM.units}
    for name, knob in knobs.items():
        if name.startswith("map_"):
            assert set(knob.options) <= have


def test_knob_conditions() -> None:
    knobs = {k.name: k for k in knob_table(suite_spec("gemm"), H200)}
    split, schedule, regs = knobs["consumer_split"], knobs["wg_schedule"], knobs["producer_regs"]
    for ws in (True, False):
        for consumers in (1, 2, 3):
            choices = {"warp_specialized": ws, "consumer_warpgroups": consumers}
            assert split.applies(choices) == (ws and consumers >= 2)
            assert schedule.applies(choices) == (consumers >= 2)
            assert regs.applies(choices) == ws
    assert knobs["tile_m"].applies({}) and knobs["persistent"].applies({})


def test_gemm_offers_an_n_tile_fitted_to_the_shape() -> None:
    options = {"gemm": (64, 128, 256)}
    assert fitted_tile(6000, options["gemm"]) == 240  # 25 tiles, no column padded
    assert fitted_tile(4096, options["gemm"]) is None  # 256 divides it already
    assert fitted_tile(3000, options["gemm"]) is None  # every wide tile pads 8 columns
    tiles = {k.name: k.options for k in knob_table(parse_spec("gemm", {**GEMM, "n": 6000}),
                                                   H200)}["tile_n"]
    assert 240 in tiles and tiles == tuple(sorted(tiles))
    assert 240 not in {k.name: k.options for k in knob_table(suite_spec("gemm"), H200)}["tile_n"]


def test_a_fixed_knob_leaves_the_slice_of_the_space_where_it_holds() -> None:
    spec = suite_spec("gemm")
    whole = ScheduleSpace(spec, H200)
    part = ScheduleSpace(spec, H200, fixed={"tile_m": 128, "persistent": True})
    options = {k.name: k.options for k in part.knobs}
    assert options["tile_m"] == (128,) and options["persistent"] == (True,)
    assert [k.name for k in part.knobs] == [k.name for k in whole.knobs]
    with pytest.raises(ValueError, match="no knob 'tile_q'"):
        ScheduleSpace(spec, H200, fixed={"tile_q": 64})
    with pytest.raises(ValueError, match="tile_m=100 is not one of"):
        ScheduleSpace(spec, H200, fixed={"tile_m": 100})


# ----- enumeration ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("op", OPS)
def test_suite_space_sizes(op: str, enumerated: Callable[..., Enumerated]) -> None:
    space, candidates, count = enumerated(op)
    rejected = sum(count.rejected.values())
    print(
        f"\n{op} on {H200.name}: {count.total:,} schedules, {count.valid:,} valid "
        f"({len(candidates):,} structural), rejected {dict(count.rejected)}"
    )
    assert count.valid > 0
    assert count.valid + rejected == count.total
    assert count.total == count_points(space.knobs)
    multiplier = math.prod(len(k.options) for k in space.order_knobs)
    assert count.valid == len(candidates) * multiplier
    assert all(n > 0 and n % multiplier == 0 for n in count.rejected.values())
    assert len(count.rejected) >= 3
    assert {r.value for r in EXPECTED_REASONS[op]} <= set(count.rejected)


def test_attention_space_has_at_least_a_thousand_valid_schedules(
    enumerated: Callable[..., Enumerated],
) -> None:
    _, _, count = enumerated("attention")
    assert count.valid >= 1000


@pytest.mark.parametrize("op", OPS)
def test_candidates_are_distinct_valid_and_plan_to_their_sprogram(
    op: str, enumerated: Callable[..., Enumerated], candidate_keys: Callable[[str], set[tuple]]
) -> None:
    space, candidates, _ = enumerated(op)
    assert len(candidate_keys(op)) == len(candidates)
    assert all(c.validity.ok for c in candidates)
    structural = {k.name for k in space.structural_knobs}
    for candidate in random.Random(op).sample(candidates, 25):
        assert set(candidate.choices) <= structural
        sprogram = plan_sprogram(space.spec, space.device, candidate.choices)
        assert candidate.sprogram == sprogram
        assert check_valid(sprogram, space.spec, space.device) == candidate.validity


def test_points_left_out_of_the_candidates_are_rejected(
    enumerated: Callable[..., Enumerated], candidate_keys: Callable[[str], set[tuple]]
) -> None:
    space, _, _ = enumerated("gemm")
    kept = candidate_keys("gemm")
    left_out = [c for c in space.structural_choices() if key(c) not in kept]
    for choices in random.Random(1).sample(left_out, 150):
        _, validity = space.build(choices)
        assert not validity.ok, choices


@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("wg_schedule", ["free", "alternate"])
def test_warp_specialised_gemm_is_a_candidate(
    persistent: bool, wg_schedule: str, candidate_keys: Callable[[str], set[tuple]]
) -> None:
    # 512 tiles of 128 x 256 leave 116 blocks of the last wave: stream-K is asked for.
    stream_k = {"stream_k": 0} if persistent else {}
    design = {**GEMM_WS, "persistent": persistent, "wg_schedule": wg_schedule, **stream_k}
    assert key(design) in candidate_keys("gemm")


def test_fa3_plan_is_a_candidate(enumerated: Callable[..., Enumerated]) -> None:
    _, candidates, _ = enumerated("attention")
    members = [c for c in candidates if FA3.items() <= c.choices.items()]
    assert members
    assert {c.choices["persistent"] for c in members} == {True, False}
    sprogram = members[0].sprogram
    assert sprogram.roles.consumer_warpgroups == 2 and sprogram.roles.warp_specialized
    assert any(b.kind == "turn" for b in sprogram.barriers)


@pytest.mark.parametrize("op", ["attention", "mamba2_chunk_state"])
def test_a100_candidates_use_cp_async_and_even_register_shares(
    op: str, enumerated: Callable[..., Enumerated]
) -> None:
    _, candidates, count = enumerated(op, "a100")
    assert candidates and count.valid > 0
    for candidate in candidates:
        decided = candidate.decisions
        assert decided.order == "serial" and UnitKind.TMA not in decided.mapping.values()
        roles = decided.roles
        if roles.warp_specialized:  # no setmaxnreg: the producer keeps the consumers' share
            assert roles.producer_regs == roles.consumer_regs


# ----- define-by-run sampling -----------------------------------------------------------


class RecordingTrial:
    """A fake Optuna trial: ``pick(options)`` decides; every question is recorded."""

    def __init__(self, pick: Callable[[list[Any]], Any]) -> None:
        self.pick = pick
        self.asked: list[tuple[str, list[Any]]] = []

    def suggest_categorical(self, name: str, choices: list[Any]) -> Any:
        self.asked.append((name, list(choices)))
        return self.pick(choices)


def _tiles(space: ScheduleSpace, choices: dict[str, Any]) -> int:
    graph = space.spec.graph({})
    return math.prod(-(-graph.extents[a] // choices.get(f"tile_{a}", graph.extents[a]))
                     for a in graph.spatial_axes)


def _partial_last_wave(space: ScheduleSpace, choices: dict[str, Any]) -> bool:
    """Whether the tiles of ``choices`` leave a persistent grid's last wave part-empty
    (a cluster's blocks take their tiles together: the wave is of clusters)."""
    tiles = _tiles(space, choices)
    size = choices.get("cluster_size", 1)
    return (tiles // size) % space.device.clusters_at_once(size) != 0


def expected_questions(space: ScheduleSpace, choices: dict[str, Any]) -> list[str]:
    """The knobs whose conditions hold for ``choices``, from the table's documented rules."""
    consumers = choices.get("consumer_warpgroups", 1)
    ws = choices.get("warp_specialized", False)
    skipped = set()
    if not (choices.get("persistent") and ws
            and choices.get("consumer_split", "cooperative") == "cooperative"
            and _partial_last_wave(space, choices)):
        skipped.add("stream_k")
    if not (ws and choices.get("cluster_size", 1) < 2 and not choices.get("stream_k")
            and choices.get("consumer_split", "cooperative") == "cooperative"
            and 2 * _tiles(space, choices) <= space.device.sm_count):
        skipped.add("split_k")
    if choices.get("split_k", 1) < 2:
        skipped.add("split_k_reduce")
    if not (consumers >= 2 and ws):
        skipped.add("consumer_split")
    if consumers < 2:
        skipped.add("wg_schedule")
    if not ws:
        skipped.update({"producer_regs", "cluster_size"})
    if choices.get("cluster_size", 1) < 2:
        skipped.add("cluster_axis")
    return [k.name for k in space.knobs if k.name not in skipped]


@pytest.mark.parametrize("op", OPS)
def test_suggest_with_the_first_option_skips_the_split_of_one_consumer(op: str) -> None:
    space = ScheduleSpace(suite_spec(op), H200)
    trial = RecordingTrial(lambda options: options[0])
    choices = space.suggest(trial)
    asked = [name for name, _ in trial.asked]
    assert choices["warp_specialized"] is True and choices["consumer_warpgroups"] == 1
    assert "consumer_split" not in asked and "wg_schedule" not in asked
    assert "producer_regs" in asked
    assert asked == list(choices) == expected_questions(space, choices)
    sprogram = plan_sprogram(space.spec, H200, choices)
    assert sprogram.choices == choices
    assert sprogram.roles.consumer_warpgroups == 1


def test_suggest_with_the_last_option_asks_the_schedule_but_not_the_split() -> None:
    space = ScheduleSpace(suite_spec("gemm"), H200)
    trial = RecordingTrial(lambda options: options[-1])
    choices = space.suggest(trial)
    # Three consumers without a producer warp: they take turns or not, but only a
    # warp-specialised kernel can give each its own tile.
    assert choices["warp_specialized"] is False and choices["consumer_warpgroups"] == 3
    asked = [name for name, _ in trial.asked]
    assert "wg_schedule" in asked
    assert "consumer_split" not in asked and "producer_regs" not in asked
    assert plan_sprogram(space.spec, H200, choices).roles.consumer_warpgroups == 3


@pytest.mark.parametrize("device_name", DEVICES)
@pytest.mark.parametrize("op", OPS)
def test_seeded_suggestions_ask_only_applicable_knobs_and_plan(op: str, device_name: str) -> None:
    device = DEVICES[device_name]
    space = ScheduleSpace(suite_spec(op), device)
    options = {k.name: list(k.options) for k in space.knobs}
    rng = random.Random(f"{op}:{device_name}")
    valid = 0
    for _ in range(120):
        trial = RecordingTrial(rng.choice)
        choices = space.suggest(trial)
        assert [name for name, _ in trial.asked] == expected_questions(space, choices)
        assert all(offered == options[name] for name, offered in trial.asked)
        sprogram, validity = space.build(choices)
        assert sprogram.choices == choices
        valid += validity.ok
    # The space alone (no code generator narrowing it, e.g. to Hopper's TMA loads) holds
    # buildable schedules on every device of the catalog.
    assert valid > 0


def test_suggest_drives_an_optuna_study() -> None:
    optuna = pytest.importorskip("optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = suite_spec("gemm")
    space = ScheduleSpace(spec, H200)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    scored = 0
    for _ in range(30):
        trial = study.ask()
        choices = space.suggest(trial)
        assert trial.params == choices
        sprogram, validity = space.build(choices)
        if validity.ok:
            study.tell(trial, estimate(sprogram, spec, H200).latency_us)
            scored += 1
        else:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    assert scored > 0
    assert plan_sprogram(spec, H200, study.best_trial.params).choices == study.best_trial.params


# ----- ranking --------------------------------------------------------------------------


def best_over_orders(space: ScheduleSpace, candidate: Candidate) -> float:
    orders = list(space.order_choices())
    return min(
        estimate(space.with_order(candidate, o), space.spec, space.device).latency_us
        for o in orders
    )


def test_rank_top_is_the_exact_top_of_the_cost_model_for_gemm(
    enumerated: Callable[..., Enumerated],
) -> None:
    """GEMM tiles all take the same time whatever their order, so the tile order changes
    only DRAM traffic: ranking with the least-traffic order is exact."""
    space, candidates, _ = enumerated("gemm")
    subset = random.Random(0).sample(candidates, 100)
    ranked = rank_top(space, subset, 3)
    brute = sorted(best_over_orders(space, c) for c in subset)
    assert [r.estimate.latency_us for r in ranked] == pytest.approx(brute[:3], rel=1e-12)


def test_rank_top_returns_sorted_finalists_in_their_best_tile_order(
    enumerated: Callable[..., Enumerated],
) -> None:
    space, candidates, _ = enumerated("attention")
    subset = random.Random(2).sample(candidates, 60)
    ranked = rank_top(space, subset, 4)
    latencies = [r.estimate.latency_us for r in ranked]
    assert len(ranked) == 4 and latencies == sorted(latencies)
    by_choices = {key(c.choices): c for c in subset}
    for entry in ranked:
        structural = {k: v for k, v in entry.sprogram.choices.items() if not k.startswith("raster")}
        candidate = by_choices[key(structural)]
        again = estimate(entry.sprogram, space.spec, space.device)
        assert again.latency_us == entry.estimate.latency_us
        assert entry.estimate.latency_us == pytest.approx(best_over_orders(space, candidate))
    assert len({r.sprogram.hash for r in ranked}) == 4


def test_rank_top_of_more_than_there_are_ranks_them_all(
    enumerated: Callable[..., Enumerated],
) -> None:
    space, candidates, _ = enumerated("gemm")
    assert len(rank_top(space, candidates[:5], 10)) == 5
    assert rank_top(space, [], 3) == []


def test_rank_top_of_zero_is_empty(enumerated: Callable[..., Enumerated]) -> None:
    space, candidates, _ = enumerated("gemm")
    assert rank_top(space, candidates[:5], 0) == []


def test_rank_top_uses_measured_timings(enumerated: Callable[..., Enumerated]) -> None:
    space, candidates, _ = enumerated("gemm")
    subset = random.Random(3).sample(candidates, 40)
    analytic = rank_top(space, subset, 1)[0].estimate.latency_us
    slower = MeasuredTimings(unit_scale={UnitKind.TENSOR_CORE: 2.0})
    measured = rank_top(space, subset, 1, slower)[0]
    assert measured.estimate.latency_us > analytic
    assert (
        measured.estimate.latency_us
        == estimate(measured.sprogram, space.spec, space.device, slower).latency_us
    )


def test_every_operator_has_a_knob_table() -> None:
    assert set(OPERATORS) == set(OPS)


# ----- feasibility injected by the caller -----------------------------------------------


def test_a_feasibility_check_restricts_the_space_and_counts_its_rejections() -> None:
    """The search half never imports codegen; whoever composes them passes its check.
    (The tile knobs are narrowed so that the space is walked in a second.)"""
    asked: list[int] = []

    def no_tile_n_96(sprogram: Any) -> str | None:  # a stand-in for the code generator
        asked.append(sprogram.tile["n"])
        return "tile_n 96 is not generated" if sprogram.tile["n"] == 96 else None

    def narrowed(space: ScheduleSpace) -> ScheduleSpace:
        tiles = {"tile_m": (128,), "tile_n": (64, 96), "tile_k": (64,)}
        space.knobs = [replace(k, options=tiles.get(k.name, k.options)) for k in space.knobs]
        return space

    plain = narrowed(ScheduleSpace(suite_spec("gemm"), H200))
    plain_candidates, plain_count = plain.enumerate()
    space = narrowed(ScheduleSpace(suite_spec("gemm"), H200, no_tile_n_96))
    candidates, count = space.enumerate()
    dropped = sum(1 for c in plain_candidates if c.choices["tile_n"] == 96)
    multiplier = math.prod(len(k.options) for k in space.order_knobs)
    assert dropped > 0 and len(candidates) == len(plain_candidates) - dropped
    assert count.rejected["unsupported_by_codegen"] == dropped * multiplier
    assert count.total == plain_count.total and len(asked) == len(plain_candidates)
    assert all(c.choices["tile_n"] != 96 for c in candidates)
    _, validity = space.build({**GEMM_WS, "tile_n": 96})
    assert validity.rejections[0].reason is RejectReason.UNSUPPORTED
    assert validity.rejections[0].detail == "codegen: tile_n 96 is not generated"
    _, plain_validity = plain.build({**GEMM_WS, "tile_n": 96})
    assert plain_validity.ok


def test_mamba2_packs_heads_only_within_a_group() -> None:
    """tile_g (heads of one B / C group per tile) is asked only where it divides the group."""
    spec = suite_spec("mamba2_chunk_state")  # 80 heads, 1 group
    knobs = {k.name: k for k in knob_table(spec, H200)}
    assert knobs["tile_g"].options == (1, 2)
    single = parse_spec("mamba2_chunk_state", {**spec.params(), "ngroups": spec.params()["nheads"]})
    assert "tile_g" not in {k.name for k in knob_table(single, H200)}
    scan = suite_spec("mamba2_chunk_scan")
    assert {k.name: k for k in knob_table(scan, H200)}["tile_g"].options == (1, 2)
    alone = parse_spec("mamba2_chunk_scan", {**scan.params(), "ngroups": scan.params()["nheads"]})
    assert "tile_g" not in {k.name for k in knob_table(alone, H200)}
