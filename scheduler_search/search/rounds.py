"""One round of a search: ask the proposal sources, deal the free slots, make the jobs;
once :class:`~scheduler_search.search.measuring.MeasuringLoop` has measured them, tell and
record the results.

Priority proposals (seeds) take the first slots, in order of source and trial; those
without room wait for the next round. The other slots are dealt to the sources in
turns, in the preset's order, each giving its best remaining proposal; what gets no
slot is told as pruned, with its prediction reported as an intermediate value so that
the sampler still learns from it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import optuna
from optuna.trial import TrialState

from scheduler_search.search.executor import MeasurementLike
from scheduler_search.search.ledger import Ledger
from scheduler_search.search.measuring import Batch, JobFailure, make_job
from scheduler_search.search.proposals import Proposal, ProposalSource, Round, SeedsSource
from scheduler_search.search.records import CODEGEN_ERROR, TrialRecord
from scheduler_search.search.studies import add_measured, tell_measured
from scheduler_search.space import ScheduleSpace
from scheduler_search.sprogram import SProgram


class Rounds:
    """Builds, measures and completes the rounds of one search.

    Args:
        space: the schedule space (the study's distributions come from its knobs).
        make_job: a proposal's job; what code generation raises for a schedule it cannot
            write (:data:`~scheduler_search.search.measuring.JOB_ERRORS`) is the trial's
            failure (``render_error``), not the search's.
        estimator: predicted latency of an sProgram.
        seeds: the priority proposals (asked first every round).
        sources: the other sources, in the order they are asked.
        deal_order: source names in the order free slots are dealt to them.
        ledger: the records so far (updated as results come back).
    """

    def __init__(
        self,
        space: ScheduleSpace,
        make_job: Callable[[SProgram], Any],
        estimator: Callable[[SProgram], float],
        *,
        seeds: SeedsSource,
        sources: Mapping[str, ProposalSource],
        deal_order: tuple[str, ...],
        ledger: Ledger,
    ) -> None:
        self.space = space
        self.make_job = make_job
        self.estimator = estimator
        self.seeds = seeds
        self.sources = dict(sources)
        self.deal_order = deal_order
        self.ledger = ledger

    def next_batch(self, study: optuna.Study, free: int) -> Batch[Proposal]:
        """The next batch of at most ``free`` proposals, with their jobs (the invalid
        points found while proposing are told to the study and only counted)."""
        round = Round(study, free, self.ledger.measured, self.ledger.inflight, self.estimator)
        chosen = self._choose(round)
        self.ledger.invalid += sum(round.rejected.values())
        batch: Batch[Proposal] = Batch()
        for proposal in chosen:
            program = proposal.sprogram
            batch.entries.append(
                (proposal, make_job(lambda p=program: self.make_job(p), program.hash[:12])))
            self.ledger.inflight[program.hash] = proposal
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

    def drop(self, study: optuna.Study, batch: Batch[Proposal]) -> None:
        """Forget a batch that will not be measured: out of flight, its trials pruned."""
        for proposal, _ in batch.entries:
            self.ledger.inflight.pop(proposal.sprogram.hash, None)
            for trial in proposal.trials:
                study.tell(trial, state=TrialState.PRUNED)

    def complete(
        self, study: optuna.Study, results: list[tuple[Proposal, MeasurementLike | JobFailure]],
        elapsed_s: float,
    ) -> list[TrialRecord]:
        """Tell and record a measured batch's results; the records, in the batch's order."""
        records = []
        for proposal, result in results:
            self.ledger.inflight.pop(proposal.sprogram.hash, None)
            record = trial_record(proposal, result)
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


def trial_record(proposal: Proposal, result: MeasurementLike | JobFailure) -> TrialRecord:
    """A proposal's record: its measurement, or its job's failure."""
    common: dict[str, Any] = {
        "number": proposal.trial.number if proposal.trial is not None else -1,
        "choices": proposal.choices,
        "source": proposal.source,
        "schedule_hash": proposal.sprogram.hash,
        "predicted_us": proposal.predicted_us,
        "schedule": proposal.sprogram.to_dict(),
    }
    if isinstance(result, JobFailure):
        return TrialRecord(status=CODEGEN_ERROR, error=result.error, **common)
    return TrialRecord.measured(result, **common)


def _prune_ranked_out(study: optuna.Study, proposal: Proposal) -> None:
    """Tell a proposal that got no slot as pruned, its prediction as an intermediate value
    (the sampler learns from it)."""
    for trial in proposal.trials:
        if proposal.predicted_us is not None and math.isfinite(proposal.predicted_us):
            trial.report(proposal.predicted_us, step=0)
        trial.set_user_attr("ranked_out", True)
        study.tell(trial, state=TrialState.PRUNED)
