"""Neighbours of the best measured schedules: one knob changed.

Schedules one knob apart are where the cost model cannot tell candidates apart (a stage
more, another register split, another tile order) and measurement must; near the best
so far is where such differences pay.
"""

from __future__ import annotations

import random

from scheduler_search.search.config import SearchConfig
from scheduler_search.search.proposals._base import (
    Proposal,
    Round,
    by_prediction,
    valid_proposal,
)
from scheduler_search.search.records import SOURCE_LOCAL
from scheduler_search.space import Choices, ScheduleSpace


class NeighboursSource:
    """Unmeasured valid neighbours of the ``top`` best measured schedules, best
    predicted first (ties in an order drawn from ``rng``)."""

    def __init__(self, space: ScheduleSpace, rng: random.Random, *, top: int = 3) -> None:
        self.space = space
        self.rng = rng
        self.top = top

    @classmethod
    def from_config(
        cls, space: ScheduleSpace, config: SearchConfig, rng: random.Random
    ) -> NeighboursSource:
        return cls(space, rng, top=config.local_top)

    def propose(self, round: Round) -> list[Proposal]:
        if round.free <= 0:
            return []
        best = sorted((r for r in round.measured.values() if r.ok),
                      key=lambda r: r.latency_us or 0.0)[: self.top]
        found: list[Proposal] = []
        taken = round.taken()
        for record in best:
            for choices in neighbours(self.space, record.choices):
                proposal = valid_proposal(self.space, choices, SOURCE_LOCAL, taken)
                if proposal is not None:
                    found.append(proposal)
        round.predict(found)
        ties = {p.sprogram.hash: self.rng.random() for p in found}
        found.sort(key=lambda p: (by_prediction(p), ties[p.sprogram.hash]))
        return found


def neighbours(space: ScheduleSpace, choices: Choices) -> list[Choices]:
    """The schedules one knob away from ``choices``: each knob that applies set to each of
    its other options, the knobs that then apply or not walked define-by-run (a knob new
    to the walk takes its first option)."""
    found = []
    for knob in space.knobs:
        if knob.name not in choices:
            continue
        for option in knob.options:
            if option == choices[knob.name]:
                continue
            changed = {**choices, knob.name: option}
            walked: Choices = {}
            for other in space.knobs:
                if other.applies(walked):
                    value = changed.get(other.name)
                    walked[other.name] = value if value in other.options else other.options[0]
            found.append(walked)
    return found
