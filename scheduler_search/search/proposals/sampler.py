"""The sampler's proposals: trials asked of the Optuna study (TPE), seeds included.

Each ask samples the space define-by-run (``ScheduleSpace.suggest``) and is planned into
an sProgram and checked (``ScheduleSpace.build``). An invalid point is told to Optuna as
pruned right away, so the sampler learns where the space is empty; it never reaches an
executor. A schedule already measured is told that measurement (never measured twice);
one already proposed this round or in flight waits for its measurement. Seeds enqueued
in the study come out of the first asks, tagged with their source.

Only these asks enter the study as they are made, which keeps the cost per ask low:
asking the sampler for every candidate of a wide pool costs seconds per round on a GEMM
space, where most random points are invalid, so GPU presets ask it a few times per slot
and let the other sources fill the rest.
"""

from __future__ import annotations

import random
from typing import Any

from optuna.trial import TrialState

from scheduler_search.search.config import SearchConfig
from scheduler_search.search.proposals._base import Proposal, Round, by_prediction
from scheduler_search.search.records import SOURCE_SEARCH
from scheduler_search.search.studies import DUPLICATE_ATTR, SOURCE_ATTR, tell_measured
from scheduler_search.space import ScheduleSpace


class SamplerSource:
    """Asks the study: until the round's pool is ``pool_factor`` times the free slots
    (at most ``max_asks_per_candidate`` asks per pool slot), or, without a
    ``pool_factor``, ``asks_per_slot`` times per free slot. Proposals best predicted
    first (ties in the order asked)."""

    def __init__(
        self,
        space: ScheduleSpace,
        *,
        pool_factor: int | None = 4,
        max_asks_per_candidate: int = 12,
        asks_per_slot: int = 2,
    ) -> None:
        self.space = space
        self.pool_factor = pool_factor
        self.max_asks_per_candidate = max_asks_per_candidate
        self.asks_per_slot = asks_per_slot

    @classmethod
    def from_config(
        cls, space: ScheduleSpace, config: SearchConfig, rng: random.Random
    ) -> SamplerSource:
        del rng  # the study's sampler is seeded by the config
        return cls(space, pool_factor=config.pool_factor,
                   max_asks_per_candidate=config.max_asks_per_candidate,
                   asks_per_slot=config.sampler_asks_per_slot)

    def propose(self, round: Round) -> list[Proposal]:
        if round.free <= 0:
            return []
        asked: dict[str, Proposal] = {}
        if self.pool_factor is None:
            for _ in range(max(1, round.free * self.asks_per_slot)):
                self._ask_one(round, asked)
        else:
            want = max(1, round.free * self.pool_factor)
            for _ in range(want * self.max_asks_per_candidate):
                if len(round.pool) + len(asked) >= want:
                    break
                self._ask_one(round, asked)
        found = list(asked.values())
        round.predict(found)
        found.sort(key=by_prediction)
        return found

    def _ask_one(self, round: Round, asked: dict[str, Proposal]) -> None:
        """Ask one trial: a new proposal in ``asked``, or the trial told or waiting."""
        study = round.study
        trial = study.ask()
        source = trial.user_attrs.get(SOURCE_ATTR, SOURCE_SEARCH)
        choices = self.space.suggest(trial)
        try:
            sprogram, validity = self.space.build(choices)
            reason = None if validity.ok else _describe_invalid(validity)
        except Exception as exc:  # a plan that cannot even be built is invalid too
            sprogram, reason = None, f"plan: {type(exc).__name__}: {exc}"
        if reason is not None or sprogram is None:
            trial.set_user_attr("invalid", reason)
            study.tell(trial, state=TrialState.PRUNED)
            round.rejected[(reason or "invalid").split(":", 1)[0]] += 1
            return
        digest = sprogram.hash
        known = round.measured.get(digest)
        waiting_for = round.pool.get(digest) or asked.get(digest) or round.inflight.get(digest)
        if known is not None:
            trial.set_user_attr(DUPLICATE_ATTR, True)
            tell_measured(study, trial, known)
        elif waiting_for is not None:
            trial.set_user_attr(DUPLICATE_ATTR, True)
            waiting_for.waiting.append(trial)
        else:
            asked[digest] = Proposal(trial, choices, sprogram, source)


def _describe_invalid(validity: Any) -> str:
    """A rejection as one line: the reason, and the first rejection's detail."""
    reason = validity.reason
    value = getattr(reason, "value", reason)
    detail = ""
    rejections = getattr(validity, "rejections", None)
    if rejections:
        first = rejections[0]
        detail = getattr(first, "detail", "") or getattr(first, "message", "")
    return f"{value}: {detail}" if detail else str(value)
