"""One round of a search: ask the proposal sources, deal the free slots, make the jobs,
measure them, tell and record the results.

Priority proposals (seeds) take the first slots, in order of source and trial; those
without room wait for the next round. The other slots are dealt to the sources in
turns, in the preset's order, each giving its best remaining proposal; what gets no
slot is told as pruned, with its prediction reported as an intermediate value so that
the sampler still learns from it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState

from scheduler_search.search.executor import ExecutorLike, MeasurementLike
from scheduler_search.search.ledger import Ledger
from scheduler_search.search.proposals import Proposal, ProposalSource, Round, SeedsSource
from scheduler_search.search.records import CODEGEN_ERROR, TrialRecord
from scheduler_search.search.studies import add_measured, tell_measured
from scheduler_search.space import ScheduleSpace
from scheduler_search.sprogram import SProgram

logger = logging.getLogger(__name__)


@dataclass
class Batch:
    """One round's proposals, each with its job or the reason it has none."""

    items: list[tuple[Proposal, Any, str]] = field(default_factory=list)

    @property
    def jobs(self) -> list[Any]:
        return [job for _, job, _ in self.items if job is not None]

    def __len__(self) -> int:
        return len(self.items)


class Rounds:
    """Builds, measures and completes the rounds of one search.

    Args:
        space: the schedule space (the study's distributions come from its knobs).
        executor: measures the batches.
        make_job: a proposal's job; an exception is the trial's failure
            (``render_error``), not the search's.
        estimator: predicted latency of an sProgram.
        seeds: the priority proposals (asked first every round).
        sources: the other sources, in the order they are asked.
        deal_order: source names in the order free slots are dealt to them.
        ledger: the records so far (updated as results come back).
    """

    def __init__(
        self,
        space: ScheduleSpace,
        executor: ExecutorLike,
        make_job: Callable[[SProgram], Any],
        estimator: Callable[[SProgram], float],
        *,
        seeds: SeedsSource,
        sources: Mapping[str, ProposalSource],
        deal_order: tuple[str, ...],
        ledger: Ledger,
    ) -> None:
        self.space = space
        self.executor = executor
        self.make_job = make_job
        self.estimator = estimator
        self.seeds = seeds
        self.sources = dict(sources)
        self.deal_order = deal_order
        self.ledger = ledger

    def next_batch(self, study: optuna.Study, free: int) -> Batch:
        """The next batch of at most ``free`` proposals, with their jobs (the invalid
        points found while proposing are told to the study and only counted)."""
        round = Round(study, free, self.ledger.measured, self.ledger.inflight, self.estimator)
        chosen = self._choose(round)
        self.ledger.invalid += sum(round.rejected.values())
        batch = Batch()
        for proposal in chosen:
            try:
                job, error = self.make_job(proposal.sprogram), ""
            except Exception as exc:  # code generation failed: a failed trial
                job, error = None, f"codegen: {type(exc).__name__}: {exc}"
                logger.warning("no job for %s: %s", proposal.sprogram.hash[:12], error)
            batch.items.append((proposal, job, error))
            self.ledger.inflight[proposal.sprogram.hash] = proposal
        return batch

    def _choose(self, round: Round) -> list[Proposal]:
        """Ask every source, then deal the free slots (see the module docstring)."""
        seeded = self._ask(self.seeds, round)
        proposed = {name: self._ask(source, round) for name, source in self.sources.items()}
        priority = sorted(
            (p for found in (seeded, *proposed.values()) for p in found if p.is_priority),
            key=lambda p: (p.priority, p.trial.number if p.trial is not None else 0),
        )
        chosen, held = priority[: round.free], priority[round.free :]
        self.seeds.hold(held)
        queues = [[p for p in proposed[name] if not p.is_priority] for name in self.deal_order]
        while len(chosen) < round.free and any(queues):
            for queue in queues:
                if queue and len(chosen) < round.free:
                    chosen.append(queue.pop(0))
        for queue in queues:
            for proposal in queue:
                _prune_ranked_out(round.study, proposal)
        return chosen

    @staticmethod
    def _ask(source: ProposalSource, round: Round) -> list[Proposal]:
        """One source's proposals, added to the round's pool."""
        found = source.propose(round)
        for proposal in found:
            round.pool[proposal.sprogram.hash] = proposal
        return found

    def drop(self, study: optuna.Study, batch: Batch) -> None:
        """Forget a batch that will not be measured: out of flight, its trials pruned."""
        for proposal, _, _ in batch.items:
            self.ledger.inflight.pop(proposal.sprogram.hash, None)
            for trial in proposal.trials:
                study.tell(trial, state=TrialState.PRUNED)

    def measure(self, batch: Batch) -> list[MeasurementLike]:
        """Measure a batch's jobs; runs in a thread when rounds overlap."""
        jobs = batch.jobs
        return list(self.executor.measure(jobs)) if jobs else []

    def complete(
        self, study: optuna.Study, batch: Batch, results: list[MeasurementLike],
        elapsed_s: float,
    ) -> list[TrialRecord]:
        """Tell and record a measured batch; the records, in the batch's order."""
        measured = iter(results)
        records = []
        for proposal, job, error in batch.items:
            self.ledger.inflight.pop(proposal.sprogram.hash, None)
            result = next(measured) if job is not None else None
            record = trial_record(proposal, result, error)
            record.elapsed_s = elapsed_s
            self.ledger.programs[proposal.sprogram.hash] = proposal.sprogram
            records.append(record)
            self.ledger.remember(record)
            if proposal.trial is None:
                record.number = add_measured(study, self.space, proposal.choices,
                                             proposal.source, record)
            for trial in proposal.trials:
                tell_measured(study, trial, record)
        return records


def trial_record(
    proposal: Proposal, result: MeasurementLike | None, error: str = ""
) -> TrialRecord:
    """A proposal's record: its measurement, or (``result`` None) its job's failure."""
    common: dict[str, Any] = {
        "number": proposal.trial.number if proposal.trial is not None else -1,
        "choices": proposal.choices,
        "source": proposal.source,
        "schedule_hash": proposal.sprogram.hash,
        "predicted_us": proposal.predicted_us,
        "schedule": proposal.sprogram.to_dict(),
    }
    if result is None:
        return TrialRecord(status=CODEGEN_ERROR, error=error, **common)
    return TrialRecord.measured(result, **common)


def _prune_ranked_out(study: optuna.Study, proposal: Proposal) -> None:
    """Tell a proposal that got no slot as pruned, its prediction as an intermediate value
    (the sampler learns from it)."""
    for trial in proposal.trials:
        if proposal.predicted_us is not None and math.isfinite(proposal.predicted_us):
            trial.report(proposal.predicted_us, step=0)
        trial.set_user_attr("ranked_out", True)
        study.tell(trial, state=TrialState.PRUNED)
