"""The cost model's picks: the best predicted of cheap random valid samples of the space.

Sampling the space at random costs microseconds per point where asking the sampler costs
milliseconds, so many more points can be looked at; the cost model keeps the promising
ones, which the sampler learns from once they are measured.
"""

from __future__ import annotations

import random
from typing import Any

from scheduler_search.search.config import SearchConfig
from scheduler_search.search.proposals._base import (
    Proposal,
    Round,
    by_prediction,
    valid_proposal,
)
from scheduler_search.search.records import SOURCE_MODEL
from scheduler_search.space import ScheduleSpace


class CostModelSource:
    """``per_slot`` random valid unmeasured schedules per free slot (at most 20 draws
    each), best predicted first."""

    def __init__(self, space: ScheduleSpace, rng: random.Random, *, per_slot: int = 4) -> None:
        self.space = space
        self.rng = rng
        self.per_slot = per_slot

    @classmethod
    def from_config(
        cls, space: ScheduleSpace, config: SearchConfig, rng: random.Random
    ) -> CostModelSource:
        return cls(space, rng, per_slot=config.random_per_slot)

    def propose(self, round: Round) -> list[Proposal]:
        if round.free <= 0:
            return []
        samples = round.free * self.per_slot
        found: list[Proposal] = []
        taken = round.taken()
        for _ in range(samples * 20):
            if len(found) >= samples:
                break
            proposal = valid_proposal(self.space, self.space.sample(self.rng), SOURCE_MODEL,
                                      taken)
            if proposal is not None:
                found.append(proposal)
        round.predict(found)
        found.sort(key=by_prediction)
        return found


class _RandomTrial:
    """A trial that picks every categorical at random (cheap samples of the space)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        del name
        return self.rng.choice(list(choices))
