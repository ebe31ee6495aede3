"""The proposal source protocol, the proposal it returns and the round it is given."""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import optuna

from scheduler_search.search.records import PRIORITY_SOURCES, TrialRecord
from scheduler_search.space import Choices, ScheduleSpace
from scheduler_search.sprogram import SProgram

logger = logging.getLogger(__name__)


@dataclass
class Proposal:
    """A valid schedule proposed for measurement.

    Attributes:
        trial: its trial in the working study, or ``None`` for a schedule the sampler did
            not propose (added to the study once measured).
        choices: the search choices it was built from.
        sprogram: the schedule.
        source: where it came from (``TrialRecord.source``).
        predicted_us: the estimator's latency (``None`` until predicted, or if it failed).
        waiting: later trials that asked for the same schedule; told its measurement.
    """

    trial: optuna.Trial | None
    choices: Choices
    sprogram: SProgram
    source: str
    predicted_us: float | None = None
    waiting: list[optuna.Trial] = field(default_factory=list)

    @property
    def priority(self) -> int:
        """Rank of its source among the priority sources (len: not one)."""
        if self.source in PRIORITY_SOURCES:
            return PRIORITY_SOURCES.index(self.source)
        return len(PRIORITY_SOURCES)

    @property
    def is_priority(self) -> bool:
        """A seed: measured before any other source's proposal."""
        return self.priority < len(PRIORITY_SOURCES)

    @property
    def trials(self) -> list[optuna.Trial]:
        """Every trial that waits for this schedule's measurement."""
        return [t for t in (self.trial, *self.waiting) if t is not None]


@dataclass
class Round:
    """What one round tells its proposal sources, and what they leave in it.

    Attributes:
        study: the working study (the sampler asks it; seeds are enqueued in it).
        free: executor slots this round fills (a source proposes nothing without one).
        measured: the records so far by schedule hash (an earlier attempt's included).
        inflight: proposals being measured, by hash.
        estimator: predicted latency of an sProgram.
        pool: what the sources asked before proposed this round, by hash, in order.
        rejected: points the space's checks rejected this round, by reason (told to the
            working study so the sampler learns where the space is empty; never trials).
    """

    study: optuna.Study
    free: int
    measured: Mapping[str, TrialRecord]
    inflight: Mapping[str, Proposal]
    estimator: Callable[[SProgram], float]
    pool: dict[str, Proposal] = field(default_factory=dict)
    rejected: Counter[str] = field(default_factory=Counter)

    def taken(self) -> set[str]:
        """Hashes a source must not propose again: measured, in flight or in the pool."""
        return set(self.pool) | set(self.measured) | set(self.inflight)

    def predict(self, proposals: Sequence[Proposal]) -> None:
        """Fill in the predictions still missing (a failed estimate stays ``None``)."""
        for proposal in proposals:
            if proposal.predicted_us is not None:
                continue
            try:
                proposal.predicted_us = float(self.estimator(proposal.sprogram))
            except Exception as exc:
                logger.debug("cost model failed on %s: %s", proposal.sprogram.hash[:12], exc)


class ProposalSource(Protocol):
    """Somewhere the candidates of a round come from.

    Each round, after the stop checks, the driver calls :meth:`propose` once on every
    source of its preset (the seeds first, then the sampler, then the others), each
    seeing in ``round.pool`` what the ones before it proposed. The priority proposals
    (seeds) go first, those without room held for the next round; the other free slots
    are dealt to the sources in turns, in the preset's order, each giving its best
    remaining proposal. Any other proposal that gets no slot is dropped; if it has
    trials, they are told as pruned with its prediction.

    An implementation must guarantee:
      - every proposal is a valid schedule, not in ``round.taken()``, and not proposed
        twice in one call;
      - the list is best first (the order a slot takes them in), each proposal
        predicted (``round.predict``);
      - a trial it asked of the study and does not return is told (an invalid point is
        also counted in ``round.rejected``);
      - nothing is proposed when ``round.free`` is 0.
    """

    def propose(self, round: Round) -> list[Proposal]:
        """This round's proposals, best first."""
        ...


def by_prediction(proposal: Proposal) -> float:
    """Sort key: the predicted latency, unknown or non-finite ones last."""
    predicted = proposal.predicted_us
    return predicted if predicted is not None and math.isfinite(predicted) else math.inf


def valid_proposal(
    space: ScheduleSpace, choices: Choices, source: str, taken: set[str]
) -> Proposal | None:
    """A proposal of ``choices`` without a trial if they build a valid schedule not yet
    ``taken``; its hash is then added to ``taken``."""
    try:
        sprogram, validity = space.build(choices)
    except Exception:
        return None
    if not validity.ok or sprogram.hash in taken:
        return None
    taken.add(sprogram.hash)
    return Proposal(None, sprogram.choices, sprogram, source)
