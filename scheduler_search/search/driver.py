"""The search driver: an Optuna study over a ScheduleSpace, measured in batches.

One round of the loop (:mod:`~scheduler_search.search.rounds`):

1. Ask the proposal sources (:mod:`~scheduler_search.search.proposals`) for candidates:
   the seeds, the sampler's asks (a pool ``pool_factor`` times as wide as the free
   executor slots, or a few asks per slot) and whatever else the preset composes
   (neighbours of the best, the cost model's picks). Invalid points never reach an
   executor; a schedule already measured is never measured again.
2. Seeds go first; the other slots are dealt to the sources in turns, each giving its
   best predicted candidate. What gets no slot is told to the study as pruned.
3. Measure the chosen batch with the executor; tell each result.

The rounds run in :class:`~scheduler_search.search.measuring.MeasuringLoop`, the loop the
range search measures in too. With ``SearchConfig.overlap`` they overlap: while the
executor measures batch *i* (in a background thread), the driver asks and ranks batch
*i + 1*, hands it to the executor's ``prepare`` (a GPU pool compiles it on the CPU cores
meanwhile), then tells batch *i*'s results and starts measuring batch *i + 1*. The sampler
learns one batch later; the GPU never waits for the compiler or the sampler once the
pipeline is full.

The loop stops on the :class:`Budget` (trials, seconds, patience), when the sources only
propose invalid or known points (exhausted), when rounds in a row measure only latencies
already seen (``SearchConfig.stop_when_tied``: a deterministic device that cannot tell the
rest apart), or when ``should_stop`` says so; a batch in
flight is finished first (a cancel also drops the batch just proposed and skips the
re-timing, so the caller gets the best measured at once). Each schedule that enters the
few fastest is timed once more by the final method (``SearchConfig.retime_leaders``); at
the end the top few and the fastest of those are re-timed interleaved with the baselines
(:mod:`~scheduler_search.search.retiming`), and the fastest wins. The working study is
mirrored to a persistent one each round (:mod:`~scheduler_search.search.studies`).

This module imports no executor, GPU or database code: the executor is any
:class:`ExecutorLike`, jobs are built by the caller's ``make_job``, and trials leave
through callbacks.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import optuna
from optuna.trial import TrialState

from scheduler_search.search.config import SearchConfig
from scheduler_search.search.executor import ExecutorLike, MeasurementLike, ok_latency
from scheduler_search.search.ledger import Ledger
from scheduler_search.search.measuring import Batch, JobFailure, MeasuringLoop
from scheduler_search.search.proposals import Proposal, SeedSource, SeedsSource, build_sources
from scheduler_search.search.records import Progress, SearchCallbacks, SearchResult, TrialRecord
from scheduler_search.search.retiming import Baselines, FinalRetiming, LeaderRetiming
from scheduler_search.search.rounds import Rounds
from scheduler_search.search.stopping import Budget, Stopper, StopReason
from scheduler_search.search.studies import Studies
from scheduler_search.space import Choices, ScheduleSpace
from scheduler_search.sprogram import SProgram


class SearchDriver:
    """Runs one tuning search (see the module docstring for the loop).

    Args:
        space: the schedule space of the workload on the device.
        executor: measures batches (``batch_size`` sets the width; ``prepare`` receives
            the next batch early when rounds overlap).
        make_job: builds the executor's job for an sProgram; what code generation raises
            for a schedule it cannot write (:data:`~scheduler_search.search.measuring.JOB_ERRORS`)
            is the trial's failure (status ``render_error``), not the search's.
        budget: trials / seconds / patience.
        config: seed, pool width, proposal sources, re-timing, batch width, overlap.
        storage: Optuna storage (URL or object) of the persistent study; ``None`` keeps
            the study in memory only.
        study_name: name of the persistent study (created, or loaded to resume).
        warm_start: choices to try first (e.g. the nearest cached shapes' best).
        designs: hand-written designs to try next.
        seed_source: polled before each round until it returns choices (not None):
            those are tried next, as ``cost_model`` trials (e.g. the cost model's best
            distinct structures, computed elsewhere while the search starts).
        estimator: predicted latency of an sProgram; the cost model by default.
        make_final_job: the job of a finalist's re-timing (default ``make_job``).
        reference_job: the vendor's baseline job, timed in the final interleaved re-timing
            with the finalists (``SearchResult.reference``).
        peer_jobs: further baseline jobs by name, timed only in the final interleaved
            re-timing, after the finalists and the reference job in the same call
            (``SearchResult.peers``; see :class:`~scheduler_search.search.retiming.Baselines`).
        history: trials of an earlier, interrupted attempt of the same run: their hashes
            are never measured again, they count against the budget, and the persistent
            study gets those it lacks (stored through ``callbacks.on_trials``, never mirrored).
        elapsed_before_s: time the earlier attempt spent (counts against ``seconds``).
        callbacks: what the search tells its caller (each round's records, progress) and
            asks it (whether to stop), :class:`~scheduler_search.search.records.SearchCallbacks`.
    """

    def __init__(
        self,
        space: ScheduleSpace,
        executor: ExecutorLike,
        make_job: Callable[[SProgram], Any],
        *,
        budget: Budget | None = None,
        config: SearchConfig | None = None,
        storage: str | optuna.storages.BaseStorage | None = None,
        study_name: str | None = None,
        warm_start: Sequence[Choices] = (),
        designs: Sequence[Choices] = (),
        seed_source: SeedSource | None = None,
        estimator: Callable[[SProgram], float] | None = None,
        make_final_job: Callable[[SProgram], Any] | None = None,
        reference_job: Any = None,
        peer_jobs: Mapping[str, Any] | None = None,
        history: Sequence[TrialRecord] = (),
        elapsed_before_s: float = 0.0,
        callbacks: SearchCallbacks | None = None,
    ) -> None:
        self.space = space
        self.executor = executor
        self.make_job = make_job
        self.make_final_job = make_final_job or make_job
        self.budget = budget or Budget()
        self.config = config or SearchConfig()
        self._callbacks = callbacks or SearchCallbacks()
        self._stopper = Stopper(self.budget, elapsed_before_s=elapsed_before_s)
        self._studies = Studies(storage, study_name, mirror_pruned=self.config.mirror_pruned)
        self._ledger = Ledger()
        self._history = tuple(history)
        for record in history:
            self._ledger.remember(record)
        self._baselines = Baselines(reference_job, peer_jobs or {})
        self._seeds = SeedsSource(space, warm_start, designs, seed_source)
        rng = random.Random(f"pipetune-search:{self.config.seed}")
        self._rounds = Rounds(
            space, make_job, estimator or self._cost_model,
            seeds=self._seeds, sources=build_sources(space, self.config, rng),
            deal_order=self.config.sources, ledger=self._ledger,
        )
        self._retiming = FinalRetiming(
            executor, self.make_final_job, self._baselines,
            top_k=self.config.retime_top_k, rounds=self.config.retime_rounds,
        )
        self._leaders = LeaderRetiming(executor, self.make_final_job,
                                       top=self.config.retime_leaders)

    def run(self) -> SearchResult:
        """Search until a stop reason, re-time the finalists; the outcome."""
        study = self._studies.open(seed=self.config.seed,
                                   n_startup_trials=self.config.n_startup_trials,
                                   space=self.space, history=self._history)
        reason = self._search(study)
        for proposal in self._seeds.release():  # seeds the budget left unmeasured
            for trial in proposal.trials:
                study.tell(trial, state=TrialState.PRUNED)
        self._studies.sync(study)
        if reason is StopReason.CANCELLED:  # the caller is waiting: no re-timing
            finalists = self._retiming.without_retiming(self._ledger)
        else:
            finalists = self._retiming.run(
                self._ledger, lambda: self._progress("retime"),
                leaders=self._leaders.fastest(self.config.retime_top_k))
        best = finalists[0] if finalists else None
        self._progress("done", best)
        ledger = self._ledger
        return SearchResult(
            best=best,
            finalists=finalists,
            trials_done=ledger.trials_done,
            invalid=ledger.invalid,
            stop_reason=reason,
            elapsed_s=self._stopper.elapsed_s,
            reference=self._baselines.reference,
            curve=list(ledger.curve),
            peers=dict(self._baselines.peers),
        )

    def _search(self, study: optuna.Study) -> StopReason:
        """The rounds, until a stop reason (a batch in flight is finished first)."""
        loop = MeasuringLoop(self.executor, overlap=self.config.overlap)
        return loop.run(_DriverRounds(self, study))

    def _end_round(self, study: optuna.Study, records: list[TrialRecord]) -> None:
        if records:
            self._ledger.note_round(records)
            self._callbacks.on_trials(records)
            self._leaders.after_round(self._ledger)
        self._studies.sync(study)
        self._progress("search")

    def _stop_reason(self, empty_rounds: int) -> StopReason | None:
        reason = self._stopper.reason(
            trials_done=self._ledger.trials_committed,
            since_improvement=self._ledger.since_improvement,
            cancelled=self._callbacks.should_stop(),
        )
        if reason is None and empty_rounds >= self.config.exhausted_after:
            reason = StopReason.EXHAUSTED
        tied = self.config.stop_when_tied
        if reason is None and tied is not None and self._ledger.tied_rounds >= tied:
            reason = StopReason.INDISTINGUISHABLE
        return reason

    def _free_slots(self, first: bool = False) -> int:
        """This round's width: the batch size (the first round's, for the ``first``),
        never more than the budget has left."""
        width = self.config.batch_size or self.executor.batch_size()
        if first and self.config.first_batch_size:
            width = min(width, self.config.first_batch_size)
        return min(width, self._stopper.remaining_trials(self._ledger.trials_committed))

    def _progress(self, phase: str, best: TrialRecord | None = None) -> None:
        """Progress with the best so far: ``best`` (the winner, at the end), else the leader
        fastest by the final method, the figure the winner will be chosen by (the quick
        timing reads several percent fast, unevenly), else the quick timing's best."""
        leader = None if best else self._leaders.best()
        if leader is not None:
            latency_us, best = leader
        else:
            best = best or self._ledger.best
            latency_us = best.latency_us if best else None
        self._callbacks.on_progress(
            Progress(
                phase=phase,
                trials_done=self._ledger.trials_done,
                trials_budget=self.budget.trials,
                invalid=self._ledger.invalid,
                best_latency_us=latency_us,
                best_schedule_hash=best.schedule_hash if best else None,
                elapsed_s=self._stopper.elapsed_s,
                reference_latency_us=ok_latency(self._baselines.reference),
            )
        )

    def _cost_model(self, sprogram: SProgram) -> float:
        from scheduler_search.cost_model import estimate

        return estimate(sprogram, self.space.spec, self.space.device).latency_us


class _DriverRounds:
    """The driver's rounds as :class:`MeasuringLoop` walks them (its ``MeasuredSearch``)."""

    def __init__(self, driver: SearchDriver, study: optuna.Study) -> None:
        self.driver = driver
        self.study = study
        self.rounds = 0
        self.empty_rounds = 0

    def stop_reason(self) -> StopReason | None:
        return self.driver._stop_reason(self.empty_rounds)

    def next_batch(self) -> Batch[Proposal]:
        free = self.driver._free_slots(first=self.rounds == 0)
        self.rounds += 1
        batch = self.driver._rounds.next_batch(self.study, free)
        self.empty_rounds = 0 if len(batch) else self.empty_rounds + 1
        return batch

    def cancelled(self) -> bool:
        return self.driver._callbacks.should_stop()

    def drop(self, batch: Batch[Proposal]) -> None:
        self.driver._rounds.drop(self.study, batch)

    def complete(self, batch: Batch[Proposal],
                 results: list[tuple[Proposal, MeasurementLike | JobFailure]]
                 ) -> list[TrialRecord]:
        return self.driver._rounds.complete(self.study, results,
                                            self.driver._stopper.elapsed_s)

    def end_round(self, records: list[TrialRecord]) -> None:
        self.driver._end_round(self.study, records)
