"""Seeds: schedules measured before anything the sources propose.

In this order of source: ``warm_start`` (the nearest cached shapes' best), ``design``
(hand-written designs) and ``cost_model`` (the cost model's best distinct structures,
from a ``seed_source`` that may take a while: it is polled every round until it answers).
Seeds are enqueued in the study, fixing what of each the space offers and leaving the
rest to the sampler, so they come back through the sampler's asks, tagged with their
source. Those a batch has no room for wait here for the next one instead of being ranked
out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from scheduler_search.search.proposals._base import Proposal, Round
from scheduler_search.search.records import SOURCE_COST_MODEL, SOURCE_DESIGN, SOURCE_WARM_START
from scheduler_search.search.studies import enqueue
from scheduler_search.space import Choices, ScheduleSpace

logger = logging.getLogger(__name__)

#: Polled until it returns seeds (``None``: not ready yet).
SeedSource = Callable[[], Sequence[Choices] | None]


class SeedsSource:
    """Enqueues the seeds in the study, and proposes the seeds held from earlier rounds.

    Args:
        space: fits each seed to it (``warm_start.fit_to_space``).
        warm_start: enqueued on the first round.
        designs: enqueued on the first round, after the warm start.
        seed_source: polled every round until it returns its seeds (or fails: the search
            goes on without them).
    """

    def __init__(
        self,
        space: ScheduleSpace,
        warm_start: Sequence[Choices] = (),
        designs: Sequence[Choices] = (),
        seed_source: SeedSource | None = None,
    ) -> None:
        self.space = space
        self._first = [(list(warm_start), SOURCE_WARM_START), (list(designs), SOURCE_DESIGN)]
        self._seed_source = seed_source
        self._held: list[Proposal] = []

    def propose(self, round: Round) -> list[Proposal]:
        """Enqueue what has arrived; the held seeds (none without a free slot), predicted
        again where their estimate failed."""
        for seeds, source in self._first:
            enqueue(round.study, self.space, seeds, source)
        self._first = []
        self._poll(round)
        if round.free <= 0:
            return []
        held, self._held = self._held, []
        round.predict(held)
        return held

    def hold(self, proposals: Sequence[Proposal]) -> None:
        """Keep seeds a batch had no room for until the next round."""
        self._held.extend(proposals)

    def release(self) -> list[Proposal]:
        """The seeds still held when the search ends (their trials are to be pruned)."""
        held, self._held = self._held, []
        return held

    def _poll(self, round: Round) -> None:
        if self._seed_source is None:
            return
        try:
            seeds = self._seed_source()
        except Exception:
            logger.exception("the seed source failed; searching without its seeds")
            self._seed_source = None
            return
        if seeds is not None:
            self._seed_source = None
            enqueue(round.study, self.space, seeds, SOURCE_COST_MODEL)
