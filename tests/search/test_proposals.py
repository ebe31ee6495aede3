"""Proposal sources: every source module keeps the ProposalSource protocol on a GEMM
space; the seeds come back through the sampler in order of source and wait for room;
presets compose sources by name."""

from __future__ import annotations

import random
from collections.abc import Callable

import optuna
import pytest
from search_fakes import RecordingExecutor

from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_spec
from scheduler_search.search import (
    GPU,
    SIMULATED,
    SOURCE_COST_MODEL,
    SOURCE_DESIGN,
    SOURCE_LOCAL,
    SOURCE_MODEL,
    SOURCE_SEARCH,
    SOURCE_WARM_START,
    Budget,
    CostModelSource,
    NeighboursSource,
    Proposal,
    ProposalSource,
    Round,
    SamplerSource,
    SearchCallbacks,
    SearchConfig,
    SearchDriver,
    SeedsSource,
    TrialRecord,
)
from scheduler_search.search.proposals import build_sources, by_prediction
from scheduler_search.space import ScheduleSpace
from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED
from scheduler_search.sprogram import check_valid

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE = ScheduleSpace(parse_spec("gemm", {"m": 1024, "n": 1024, "k": 1024,
                                          "dtype": "float16"}), get_device("sim:h200"))
#: As the sampler would ask for it (32 tiles on 132 SMs: stream-K and split-K are asked
#: for, and off).
BEST = {**GEMM_WARP_SPECIALIZED, "raster_major": "m", "raster_swizzle": 8, "stream_k": 0,
        "split_k": 1}


def _by_tile(sprogram) -> float:
    c = sprogram.choices
    return 100.0 + abs(c["tile_m"] - 128) + abs(c["tile_n"] - 128) / 2 + c.get("stages_ab", 1)


def _study(seed: int = 0) -> optuna.Study:
    sampler = optuna.samplers.TPESampler(seed=seed, constant_liar=True)
    return optuna.create_study(direction="minimize", sampler=sampler)


def _measured() -> dict[str, TrialRecord]:
    """One measured schedule (the warp-specialised design), as the driver keeps it."""
    sprogram, validity = SPACE.build(BEST)
    assert validity.ok
    record = TrialRecord(0, dict(sprogram.choices), "ok", schedule_hash=sprogram.hash,
                         latency_us=100.0)
    return {sprogram.hash: record}


def _round(study: optuna.Study, free: int = 3, **kwargs) -> Round:
    return Round(study, free, kwargs.pop("measured", _measured()), {}, _by_tile, **kwargs)


MAKERS: dict[str, Callable[[random.Random], ProposalSource]] = {
    "sampler_asks": lambda rng: SamplerSource(SPACE, pool_factor=None, asks_per_slot=3),
    "sampler_pool": lambda rng: SamplerSource(SPACE, pool_factor=2),
    "neighbours": lambda rng: NeighboursSource(SPACE, rng, top=1),
    "cost_model": lambda rng: CostModelSource(SPACE, rng, per_slot=3),
}


@pytest.mark.parametrize("name", list(MAKERS))
def test_every_source_keeps_the_protocol(name: str) -> None:
    source = MAKERS[name](random.Random(1))
    study = _study()
    round = _round(study)
    taken = round.taken()
    found = source.propose(round)
    assert found
    hashes = [p.sprogram.hash for p in found]
    assert len(set(hashes)) == len(hashes) and not set(hashes) & taken
    assert all(check_valid(p.sprogram, SPACE.spec, SPACE.device).ok for p in found)
    assert all(p.predicted_us == _by_tile(p.sprogram) for p in found)
    assert [by_prediction(p) for p in found] == sorted(by_prediction(p) for p in found)
    # A trial asked of the study is returned with its proposal, waits for one, or is told.
    returned = {t.number for p in found for t in p.trials}
    for trial in study.get_trials(deepcopy=False):
        assert trial.state.is_finished() or trial.number in returned
    # Invalid points are told to the study and counted by reason, never proposed.
    assert all(reason and count > 0 for reason, count in round.rejected.items())
    pruned = [t for t in study.get_trials(deepcopy=False) if "invalid" in t.user_attrs]
    assert sum(round.rejected.values()) == len(pruned)
    # No free slot, no proposal (and no ask).
    asked = len(study.trials)
    assert source.propose(_round(study, free=0)) == [] and len(study.trials) == asked


def test_the_sampler_fills_a_pool_or_asks_a_fixed_number_of_times() -> None:
    study = _study()
    pool = SamplerSource(SPACE, pool_factor=2).propose(_round(study, free=3))
    assert len(pool) == 6
    study = _study()
    SamplerSource(SPACE, pool_factor=None, asks_per_slot=2).propose(_round(study, free=3))
    assert len(study.trials) == 6


def test_the_sampler_never_proposes_a_measured_or_pooled_schedule_again() -> None:
    study = _study()
    measured = _measured()
    ((digest, record),) = measured.items()
    pooled = _pooled(study)
    round = _round(study, free=1, measured=measured)
    round.pool[pooled.sprogram.hash] = pooled
    study.enqueue_trial(record.choices)  # the sampler's first ask is the measured schedule
    study.enqueue_trial(dict(pooled.choices))  # ... and its second one the pooled one
    found = SamplerSource(SPACE, pool_factor=None, asks_per_slot=4).propose(round)
    first, second = study.get_trials(deepcopy=False)[1:3]
    assert first.state is optuna.trial.TrialState.COMPLETE and first.value == 100.0
    assert [t.number for t in pooled.waiting] == [second.number]
    assert digest not in {p.sprogram.hash for p in found}
    assert pooled.sprogram.hash not in {p.sprogram.hash for p in found}


def _pooled(study: optuna.Study) -> Proposal:
    """A proposal another source made this round (with a trial of its own)."""
    sprogram, validity = SPACE.build({**BEST, "stages_ab": 3})
    assert validity.ok
    return Proposal(study.ask(), dict(sprogram.choices), sprogram, SOURCE_LOCAL)


def test_neighbours_are_one_knob_from_the_best_and_seeded() -> None:
    def propose(seed: int) -> list[Proposal]:
        return NeighboursSource(SPACE, random.Random(seed), top=1).propose(_round(_study()))

    found = propose(3)
    assert {p.source for p in found} == {SOURCE_LOCAL}
    assert all(p.trial is None for p in found)
    assert all(sum(p.choices.get(k) != v for k, v in BEST.items()) >= 1 for p in found)
    assert [p.sprogram.hash for p in propose(3)] == [p.sprogram.hash for p in found]


def test_the_cost_model_picks_are_random_valid_samples_best_predicted_first() -> None:
    found = CostModelSource(SPACE, random.Random(2), per_slot=4).propose(_round(_study()))
    assert len(found) == 12 and {p.source for p in found} == {SOURCE_MODEL}
    again = CostModelSource(SPACE, random.Random(2), per_slot=4).propose(_round(_study()))
    assert [p.sprogram.hash for p in again] == [p.sprogram.hash for p in found]


def test_seeds_come_back_through_the_sampler_in_order_of_source() -> None:
    polls = []
    late = [{**BEST, "tile_n": 128}]

    def seed_source():
        polls.append(1)
        return late if len(polls) == 2 else None

    seeds = SeedsSource(SPACE, warm_start=[BEST], designs=[{**BEST, "stages_ab": 3}],
                        seed_source=seed_source)
    sampler = SamplerSource(SPACE, pool_factor=None, asks_per_slot=1)
    study = _study()
    round = _round(study, free=2, measured={})
    assert seeds.propose(round) == []  # seeds are enqueued: the sampler hands them out
    found = sampler.propose(round)
    assert sorted(p.source for p in found) == sorted([SOURCE_WARM_START, SOURCE_DESIGN])
    assert all(p.is_priority for p in found)
    round = _round(study, free=1, measured={})
    seeds.propose(round)  # the seed source answers on its second poll
    (third,) = sampler.propose(round)
    assert third.source == SOURCE_COST_MODEL and third.choices == late[0]
    # Seeds without room wait for the next round with a free slot.
    seeds.hold([third])
    assert seeds.propose(_round(study, free=0)) == []
    assert seeds.propose(_round(study, free=1)) == [third]
    seeds.hold([third])
    assert seeds.release() == [third] and seeds.release() == []
    assert len(polls) == 2


def test_build_sources_asks_the_sampler_first_and_refuses_unknown_names() -> None:
    sources = build_sources(SPACE, GPU.config(0), random.Random(0))
    assert list(sources) == [SOURCE_SEARCH, SOURCE_LOCAL, SOURCE_MODEL]
    assert isinstance(sources[SOURCE_LOCAL], NeighboursSource)
    with pytest.raises(ValueError, match="unknown proposal sources"):
        build_sources(SPACE, SearchConfig(sources=(SOURCE_SEARCH, "annealing")), random.Random())
    with pytest.raises(ValueError, match="must include"):
        build_sources(SPACE, SearchConfig(sources=(SOURCE_LOCAL,)), random.Random())
    with pytest.raises(ValueError, match="twice"):
        build_sources(SPACE, SearchConfig(sources=(SOURCE_SEARCH,) * 2), random.Random())


def test_presets_name_their_sources() -> None:
    simulated = SIMULATED.config(3)
    assert simulated.sources == (SOURCE_SEARCH, SOURCE_MODEL)
    assert simulated.stop_when_tied == 2 and simulated.pool_factor is None
    gpu = GPU.config(3, batch_size=6)
    assert gpu.sources == (SOURCE_LOCAL, SOURCE_SEARCH, SOURCE_MODEL)
    assert (gpu.seed, gpu.batch_size, gpu.pool_factor) == (3, 6, None)
    assert GPU.search_timing is not None and GPU.final_timing is not None
    assert SIMULATED.search_timing is None and GPU.name == "gpu"


def test_a_composition_of_sources_runs_in_the_driver() -> None:
    executor = RecordingExecutor(width=4, latency=_by_tile)
    records: list[TrialRecord] = []
    config = SearchConfig(seed=1, sources=(SOURCE_MODEL, SOURCE_SEARCH), pool_factor=2,
                          random_per_slot=1)
    result = SearchDriver(SPACE, executor, lambda p: p, estimator=_by_tile,
                          budget=Budget(trials=12), config=config,
                          callbacks=SearchCallbacks(on_trials=records.extend)).run()
    assert result.trials_done == 12
    sources = [r.source for r in records if r.status == "ok"]
    assert sources[:2] == [SOURCE_MODEL, SOURCE_SEARCH]  # dealt in turns, in that order
    assert {SOURCE_MODEL, SOURCE_SEARCH} == set(sources)
