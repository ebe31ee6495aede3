"""Where a round's candidates come from: proposal sources behind one protocol.

One module per source, each a class with ``propose(round) -> list[Proposal]``
(:class:`ProposalSource`): ``sampler`` (the Optuna study's asks), ``neighbours`` (one
knob away from the best measured), ``cost_model`` (the cost model's picks of random
samples) and ``seeds`` (warm start, designs and the cost model's seeds, measured first).
A preset composes them by name (``SearchConfig.sources``); :func:`build_sources` makes a
run's instances.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from scheduler_search.search.config import SearchConfig
from scheduler_search.search.proposals._base import (
    Proposal,
    ProposalSource,
    Round,
    by_prediction,
    valid_proposal,
)
from scheduler_search.search.proposals.cost_model import CostModelSource
from scheduler_search.search.proposals.neighbours import NeighboursSource, neighbours
from scheduler_search.search.proposals.sampler import SamplerSource
from scheduler_search.search.proposals.seeds import SeedSource, SeedsSource
from scheduler_search.search.records import SOURCE_LOCAL, SOURCE_MODEL, SOURCE_SEARCH
from scheduler_search.space import ScheduleSpace

#: The sources a preset may name, each made from the space, the config and the run's
#: random generator (shared, so that a seeded run draws the same numbers in turn).
SOURCES: dict[str, Callable[[ScheduleSpace, SearchConfig, random.Random], ProposalSource]] = {
    SOURCE_SEARCH: SamplerSource.from_config,
    SOURCE_LOCAL: NeighboursSource.from_config,
    SOURCE_MODEL: CostModelSource.from_config,
}


def build_sources(
    space: ScheduleSpace, config: SearchConfig, rng: random.Random
) -> dict[str, ProposalSource]:
    """One run's sources, by name, in the order they are asked each round: the sampler
    first (its asks hand out the seeds, and enter the study as they are made, so the
    others see what it proposed), then the others in the preset's order."""
    unknown = [name for name in config.sources if name not in SOURCES]
    if unknown:
        raise ValueError(f"unknown proposal sources {unknown}; known: {sorted(SOURCES)}")
    if len(set(config.sources)) != len(config.sources):
        raise ValueError(f"proposal sources named twice: {list(config.sources)}")
    if SOURCE_SEARCH not in config.sources:
        raise ValueError(f"sources must include {SOURCE_SEARCH!r}: the sampler hands out "
                         "the seeds")
    order = [SOURCE_SEARCH, *(name for name in config.sources if name != SOURCE_SEARCH)]
    return {name: SOURCES[name](space, config, rng) for name in order}


__all__ = [
    "SOURCES",
    "CostModelSource",
    "NeighboursSource",
    "Proposal",
    "ProposalSource",
    "Round",
    "SamplerSource",
    "SeedSource",
    "SeedsSource",
    "build_sources",
    "by_prediction",
    "neighbours",
    "valid_proposal",
]
