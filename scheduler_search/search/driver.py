"""The search driver: an Optuna study over a ScheduleSpace, measured in batches.

One round of the loop:

1. Ask the study for trials until a *pool* of new, valid candidates is
   ``pool_factor`` times as wide as the free executor slots. Each trial samples the space
   define-by-run (``ScheduleSpace.suggest``) and is planned into an sProgram and checked
   (``ScheduleSpace.build``). An invalid point is told to Optuna as pruned right away:
   it never reaches an executor. A schedule whose hash was already measured is told that
   measurement's value (never measured twice); one already in the pool waits for it.
2. Rank the pool with the cost model; warm-start candidates go first, then the best
   predicted fill the free slots. The rest are told as pruned, with the prediction
   reported as an intermediate value so that the sampler still learns from them.
3. Measure the chosen batch with the executor; tell each result.

With ``SearchConfig.overlap`` the rounds overlap: while the executor measures batch *i*
(in a background thread), the driver asks and ranks batch *i + 1*, hands it to the
executor's ``prepare`` (a GPU pool compiles it on the CPU cores meanwhile), then tells
batch *i*'s results and starts measuring batch *i + 1*. The sampler learns one batch
later; the GPU never waits for the compiler or the sampler once the pipeline is full.

With ``SearchConfig.proposals = "mixed"`` (GPU runs), a batch is not all the sampler's:
after the priority candidates, its slots go in turn to three sources, each ranked by the
cost model: ``search`` (the sampler's asks, a few per slot; invalid ones still teach it
where the space is empty), ``local`` (the neighbours of the best measured schedules: one
knob changed, which is where the cost model cannot tell schedules apart and measurement
must) and ``model`` (the cost model's best of cheap random valid samples of the space).
Only the sampler's asks enter the study as they are made, so its cost per ask stays low
(asking the sampler for every pool candidate costs seconds per round on a GEMM space,
where most random points are invalid); the other sources' candidates are added to it
once measured.

Priority candidates go first, in this order of sources: ``warm_start`` (the nearest cached
shapes' best), ``design`` (hand-written designs) and ``cost_model`` (the cost model's best
distinct structures, from ``seed_source``, which may take a while: it is polled before
each round). Those that do not fit in a batch wait for the next one instead of being
ranked out. A schedule is never measured twice: a repeat of a measured or in-flight
hash waits for that measurement.

The loop stops on the :class:`Budget` (trials, seconds, patience), when the sampler only
proposes invalid or known points (exhausted), or when ``should_stop`` says so; a batch in
flight is finished first. Then the top few are re-timed interleaved
(``Executor.retime_interleaved``), with the ``reference_job`` (a vendor baseline, timed
the same way) and the ``peer_jobs`` (further baselines, e.g. FlashAttention-2 besides
cuDNN for attention) among them, and the fastest wins.

Storage: the sampler works against an in-memory study; its measured trials (and, if asked,
the pruned ones too) are added to the persistent study (``storage``, typically Optuna's RDB
storage in the service's database) at the end of each round. Sampling straight from the
RDB storage costs a round trip per suggested parameter: measured here, 368 trials took
64 s on a local PostgreSQL 15 and 15 s on SQLite against 2.5 s in memory (2-core machine,
Optuna 5.0). On resume the persistent study's trials are loaded back into the working
study.

This module imports no executor, GPU or database code: the executor is any object with
``capacity``, ``measure`` and ``retime_interleaved`` (``workers.Executor`` has them), jobs
are built by the caller's ``make_job``, and trials leave through callbacks.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

from scheduler_search.search.stopping import Budget, Stopper, StopReason
from scheduler_search.search.warm_start import fit_to_space
from scheduler_search.space import Choices, ScheduleSpace
from scheduler_search.sprogram import SProgram

logger = logging.getLogger(__name__)

#: Trial status of a point rejected before measurement (``check_valid`` or planning).
INVALID = "invalid"
SOURCE_WARM_START = "warm_start"
SOURCE_DESIGN = "design"
SOURCE_COST_MODEL = "cost_model"
SOURCE_SEARCH = "search"
SOURCE_LOCAL = "local"
SOURCE_MODEL = "model"
#: Sources measured before what the sampler proposes, in this order.
PRIORITY_SOURCES = (SOURCE_WARM_START, SOURCE_DESIGN, SOURCE_COST_MODEL)
#: Trial status of a candidate whose job could not be made (code generation failed; not
#: the compiler's ``compile_error``).
CODEGEN_ERROR = "render_error"
_SOURCE_ATTR = "pipetune_source"
_DUPLICATE_ATTR = "duplicate"


class MeasurementLike(Protocol):
    """What the driver reads of a measurement (``workers.Measurement`` has it)."""

    latency_us: float | None
    error: str
    simulated: bool

    @property
    def status(self) -> Any: ...

    def to_dict(self) -> dict[str, Any]: ...


class ExecutorLike(Protocol):
    """What the driver needs of an executor (``workers.Executor`` has it)."""

    def capacity(self) -> int: ...

    def measure(self, jobs: Sequence[Any]) -> Sequence[MeasurementLike]: ...

    def retime_interleaved(
        self, jobs: Sequence[Any], rounds: int = 3
    ) -> Sequence[MeasurementLike]: ...


@dataclass(frozen=True)
class SearchConfig:
    """Knobs of the search itself.

    Args:
        seed: seeds the sampler; same seed, same space and same measurements give the same
            trials.
        pool_factor: candidates ranked by the cost model per free executor slot.
        n_startup_trials: trials the TPE sampler draws at random before modelling.
        retime_top_k: finalists re-timed at the end (1: no re-timing beyond one round).
        retime_rounds: interleaved rounds of the final re-timing.
        max_asks_per_candidate: asks allowed per pool slot before a round gives up.
        exhausted_after: rounds in a row without a new candidate that end the search.
        mirror_pruned: also copy pruned trials to the persistent study (slow on an RDB).
        batch_size: candidates measured per round (default: the executor's
            ``batch_size()`` if it has one, else its ``capacity()``).
        overlap: pipeline the rounds (see the module docstring).
        proposals: ``"tpe"`` (every candidate is asked of the sampler; the pool is ranked
            by the cost model) or ``"mixed"`` (see the module docstring).
        sampler_asks_per_slot: ``mixed``: asks of the sampler per free slot and round.
        local_top: ``mixed``: measured schedules whose neighbours are proposed.
        random_per_slot: ``mixed``: random valid samples per free slot the cost model
            picks from.
    """

    seed: int = 0
    pool_factor: int = 4
    n_startup_trials: int = 16
    retime_top_k: int = 3
    retime_rounds: int = 3
    max_asks_per_candidate: int = 12
    exhausted_after: int = 3
    mirror_pruned: bool = False
    batch_size: int | None = None
    overlap: bool = False
    proposals: str = "tpe"
    sampler_asks_per_slot: int = 2
    local_top: int = 3
    random_per_slot: int = 4


@dataclass
class TrialRecord:
    """One trial as the service stores it: a measured candidate or a rejected point."""

    number: int
    choices: Choices
    status: str
    source: str = SOURCE_SEARCH
    schedule_hash: str | None = None
    latency_us: float | None = None
    predicted_us: float | None = None
    error: str = ""
    simulated: bool = False
    measurement: dict[str, Any] | None = None
    schedule: dict[str, Any] | None = field(default=None, repr=False)
    elapsed_s: float | None = None  # search time when its measurement came back

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.latency_us is not None


@dataclass(frozen=True)
class Progress:
    """A snapshot for progress bars and event streams."""

    phase: str  # "search", "retime" or "done"
    trials_done: int
    trials_budget: int
    invalid: int
    best_latency_us: float | None
    best_schedule_hash: str | None
    elapsed_s: float
    reference_latency_us: float | None = None


@dataclass
class SearchResult:
    """The outcome: the winner after re-timing, the finalists, why the search stopped.

    ``reference`` is the ``reference_job``'s measurement from the final re-timing (or
    from the start, if the re-timing had no finalist); ``peers`` the ``peer_jobs``'
    measurements from the final re-timing, by name (failed ones included, as the executor
    returned them; empty if the re-timing had no finalist); ``curve`` the best-so-far
    steps as (search seconds, latency) pairs, one per improvement.
    """

    best: TrialRecord | None
    finalists: list[TrialRecord]
    trials_done: int
    invalid: int
    stop_reason: StopReason
    elapsed_s: float
    reference: MeasurementLike | None = None
    curve: list[tuple[float, float]] = field(default_factory=list)
    peers: dict[str, MeasurementLike] = field(default_factory=dict)


@dataclass
class _Candidate:
    trial: optuna.Trial | None  # None: not asked of the sampler (added once measured)
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


@dataclass
class _Batch:
    """One round's candidates, each with its job or the reason it has none."""

    items: list[tuple[_Candidate, Any, str]] = field(default_factory=list)
    carries_reference: bool = False

    @property
    def jobs(self) -> list[Any]:
        return [job for _, job, _ in self.items if job is not None]

    def __len__(self) -> int:
        return len(self.items)


class SearchDriver:
    """Runs one tuning search (see the module docstring for the loop).

    Args:
        space: the schedule space of the workload on the device.
        executor: measures batches (``batch_size`` or ``capacity`` sets the width; an
            optional ``prepare`` receives the next batch early).
        make_job: builds the executor's job for an sProgram; an exception is the trial's
            failure (status ``render_error``), not the search's.
        budget: trials / seconds / patience.
        config: seed, pool width, re-timing, batch width, overlap.
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
        reference_job: a baseline job, measured with the first batch and re-timed with
            the finalists (``SearchResult.reference``).
        peer_jobs: further baseline jobs by name, timed only in the final interleaved
            re-timing, after the finalists and the reference job in the same call
            (``SearchResult.peers``). Unlike the reference, whose early timing the
            progress reports, a peer is only compared with the winner: timed in the same
            interleaved rounds, it meets the GPU's drift as the finalists do, and timing it
            with the first batch as well would only lengthen the first round.
        history: trials of an earlier, interrupted attempt of the same run: their hashes
            are never measured again and they count against the budget.
        elapsed_before_s: time the earlier attempt spent (counts against ``seconds``).
        on_trials: called with each round's new records (measured and invalid).
        on_progress: called after each round and phase change.
        should_stop: polled between rounds; true ends the search as cancelled.
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
        seed_source: Callable[[], Sequence[Choices] | None] | None = None,
        estimator: Callable[[SProgram], float] | None = None,
        make_final_job: Callable[[SProgram], Any] | None = None,
        reference_job: Any = None,
        peer_jobs: Mapping[str, Any] | None = None,
        history: Sequence[TrialRecord] = (),
        elapsed_before_s: float = 0.0,
        on_trials: Callable[[list[TrialRecord]], None] | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        self.space = space
        self.executor = executor
        self.make_job = make_job
        self.make_final_job = make_final_job or make_job
        self.budget = budget or Budget()
        self.config = config or SearchConfig()
        self._storage = storage
        self._study_name = study_name
        self._warm_start = list(warm_start)
        self._designs = list(designs)
        self._seed_source = seed_source
        self._estimator = estimator or self._cost_model
        self._reference_job = reference_job
        self._reference: MeasurementLike | None = None
        self._reference_pending = reference_job is not None
        self._peer_jobs = dict(peer_jobs or {})
        self._peers: dict[str, MeasurementLike] = {}
        self._on_trials = on_trials or (lambda records: None)
        self._on_progress = on_progress or (lambda progress: None)
        self._should_stop = should_stop or (lambda: False)
        self._stopper = Stopper(self.budget, elapsed_before_s=elapsed_before_s)

        self._measured: dict[str, TrialRecord] = {}
        self._programs: dict[str, SProgram] = {}  # measured hash -> sProgram (re-timing)
        self._inflight: dict[str, _Candidate] = {}  # hash -> candidate being measured
        self._carry: list[_Candidate] = []  # priority candidates a batch had no room for
        self._trials_done = 0
        self._invalid = 0
        self._since_improvement = 0
        self._best: TrialRecord | None = None
        self._curve: list[tuple[float, float]] = []
        self._rng = random.Random(f"pipetune-search:{self.config.seed}")
        for record in history:
            self._remember(record)

    # ----- public ----------------------------------------------------------------------
    def run(self) -> SearchResult:
        study, mirror = self._open_studies()
        mirrored = len(study.trials)
        self._enqueue(study, self._warm_start, SOURCE_WARM_START)
        self._enqueue(study, self._designs, SOURCE_DESIGN)
        empty_rounds = 0
        measurer = ThreadPoolExecutor(1, thread_name_prefix="pipetune-measure")
        inflight: tuple[_Batch, Future[list[MeasurementLike]]] | None = None
        try:
            while True:
                reason = self._stopper.reason(
                    trials_done=self._trials_done + len(self._inflight),
                    since_improvement=self._since_improvement,
                    cancelled=self._should_stop(),
                )
                if reason is None and empty_rounds >= self.config.exhausted_after:
                    reason = StopReason.EXHAUSTED
                if reason is not None:
                    break
                self._poll_seeds(study)
                records: list[TrialRecord] = []
                batch = self._next_batch(study, records)
                if not self.config.overlap:
                    records += self._complete(study, batch, self._measure(batch))
                else:
                    prepare = getattr(self.executor, "prepare", None)
                    if batch.jobs and prepare is not None:
                        prepare(batch.jobs)
                    if inflight is not None:
                        done, future = inflight
                        inflight = None
                        records += self._complete(study, done, future.result())
                    if len(batch):
                        inflight = (batch, measurer.submit(self._measure, batch))
                empty_rounds = 0 if len(batch) else empty_rounds + 1
                if records:
                    self._on_trials(records)
                mirrored = self._mirror(study, mirror, mirrored)
                self._progress("search")
            if inflight is not None:
                done, future = inflight
                records = self._complete(study, done, future.result())
                if records:
                    self._on_trials(records)
                self._progress("search")
        finally:
            measurer.shutdown(wait=True)
        for candidate in self._carry:  # priority candidates the budget left unmeasured
            for trial in [candidate.trial, *candidate.waiting]:
                if trial is not None:
                    study.tell(trial, state=TrialState.PRUNED)
        self._carry = []
        self._mirror(study, mirror, mirrored)
        finalists = self._retime()
        best = finalists[0] if finalists else None
        self._progress("done", best)
        return SearchResult(
            best=best,
            finalists=finalists,
            trials_done=self._trials_done,
            invalid=self._invalid,
            stop_reason=reason,
            elapsed_s=self._stopper.elapsed_s,
            reference=self._reference,
            curve=list(self._curve),
            peers=dict(self._peers),
        )

    # ----- one round ---------------------------------------------------------------------
    def _batch_width(self) -> int:
        if self.config.batch_size:
            return self.config.batch_size
        width = getattr(self.executor, "batch_size", None)
        return int(width()) if width is not None else self.executor.capacity()

    def _next_batch(self, study: optuna.Study, records: list[TrialRecord]) -> _Batch:
        """Ask and rank the next batch (never more than the budget has left)."""
        free = min(
            self._batch_width(),
            self._stopper.remaining_trials(self._trials_done + len(self._inflight)),
        )
        batch = _Batch()
        if free <= 0:
            return batch
        if self.config.proposals == "mixed":
            chosen = self._mixed(study, records, free)
        else:
            want = max(1, free * self.config.pool_factor)
            pool: dict[str, _Candidate] = {c.sprogram.hash: c for c in self._carry}
            self._carry = []
            for _ in range(want * self.config.max_asks_per_candidate):
                if len(pool) >= want:
                    break
                self._ask_one(study, pool, records)
            chosen = self._rank(study, list(pool.values()), free)
        for candidate in chosen:
            try:
                job, error = self.make_job(candidate.sprogram), ""
            except Exception as exc:  # code generation failed: a failed trial
                job, error = None, f"codegen: {type(exc).__name__}: {exc}"
                logger.warning("no job for %s: %s", candidate.sprogram.hash[:12], error)
            batch.items.append((candidate, job, error))
            self._inflight[candidate.sprogram.hash] = candidate
        if batch.jobs and self._reference_pending:
            batch.carries_reference, self._reference_pending = True, False
        return batch

    def _measure(self, batch: _Batch) -> list[MeasurementLike]:
        """Measure a batch's jobs (the reference job first, once); runs in a thread when
        rounds overlap."""
        jobs = batch.jobs
        if batch.carries_reference:
            jobs = [self._reference_job, *jobs]
        results = list(self.executor.measure(jobs)) if jobs else []
        if batch.carries_reference:
            self._reference = results.pop(0)
        return results

    def _complete(
        self, study: optuna.Study, batch: _Batch, results: list[MeasurementLike]
    ) -> list[TrialRecord]:
        """Tell and record a measured batch; the records, in the batch's order."""
        measured = iter(results)
        records = []
        elapsed = self._stopper.elapsed_s
        for candidate, job, error in batch.items:
            self._inflight.pop(candidate.sprogram.hash, None)
            if job is not None:
                record = self._record(candidate, next(measured))
            else:
                record = self._record(candidate, None, error)
            record.elapsed_s = elapsed
            self._programs[candidate.sprogram.hash] = candidate.sprogram
            records.append(record)
            self._remember(record)
            if candidate.trial is None:
                record.number = self._add_measured(study, candidate, record)
            for trial in [candidate.trial, *candidate.waiting]:
                if trial is not None:
                    self._tell_measured(study, trial, record)
        return records

    def _add_measured(self, study: optuna.Study, candidate: _Candidate, record: TrialRecord) -> int:
        """Add a measured candidate that the sampler did not propose to the study, so the
        sampler learns from it; its trial number."""
        distributions = {
            knob.name: CategoricalDistribution(list(knob.options))
            for knob in self.space.knobs
            if knob.name in candidate.choices
        }
        attrs = {_SOURCE_ATTR: candidate.source}
        if record.ok:
            trial = create_trial(params=candidate.choices, distributions=distributions,
                                 value=record.latency_us, user_attrs=attrs)
        else:
            attrs["error"] = f"{record.status}: {record.error}"[:500]
            trial = create_trial(params=candidate.choices, distributions=distributions,
                                 state=TrialState.FAIL, user_attrs=attrs)
        study.add_trial(trial)
        return len(study.get_trials(deepcopy=False)) - 1

    def _ask_one(
        self, study: optuna.Study, pool: dict[str, _Candidate], records: list[TrialRecord]
    ) -> None:
        trial = study.ask()
        source = trial.user_attrs.get(_SOURCE_ATTR, SOURCE_SEARCH)
        choices = self.space.suggest(trial)
        try:
            sprogram, validity = self.space.build(choices)
            reason = None if validity.ok else _describe_invalid(validity)
        except Exception as exc:  # a plan that cannot even be built is invalid too
            sprogram, reason = None, f"plan: {type(exc).__name__}: {exc}"
        if reason is not None or sprogram is None:
            trial.set_user_attr("invalid", reason)
            study.tell(trial, state=TrialState.PRUNED)
            self._invalid += 1
            records.append(
                TrialRecord(trial.number, choices, INVALID, source=source, error=reason or "")
            )
            return
        digest = sprogram.hash
        known = self._measured.get(digest)
        waiting_for = pool.get(digest) or self._inflight.get(digest)
        if known is not None:
            trial.set_user_attr(_DUPLICATE_ATTR, True)
            self._tell_measured(study, trial, known)
        elif waiting_for is not None:
            trial.set_user_attr(_DUPLICATE_ATTR, True)
            waiting_for.waiting.append(trial)
        else:
            pool[digest] = _Candidate(trial, choices, sprogram, source)

    def _mixed(
        self, study: optuna.Study, records: list[TrialRecord], free: int
    ) -> list[_Candidate]:
        """A batch from priority candidates, then the sampler, the neighbours of the best
        and the cost model's random picks in turn (see the module docstring)."""
        asked: dict[str, _Candidate] = {c.sprogram.hash: c for c in self._carry}
        self._carry = []
        for _ in range(max(1, free * self.config.sampler_asks_per_slot)):
            self._ask_one(study, asked, records)
        self._predict(list(asked.values()))
        priority = sorted(
            (c for c in asked.values() if c.priority < len(PRIORITY_SOURCES)),
            key=lambda c: (c.priority, c.trial.number if c.trial is not None else 0),
        )
        chosen, self._carry = priority[:free], priority[free:]
        sampled = sorted(
            (c for c in asked.values() if c.priority == len(PRIORITY_SOURCES)),
            key=_by_prediction,
        )
        taken = set(asked) | set(self._measured) | set(self._inflight)
        local = self._local_candidates(taken)
        taken |= {c.sprogram.hash for c in local}
        model = self._model_candidates(taken, free * self.config.random_per_slot)
        sources = [local, sampled, model]
        while len(chosen) < free and any(sources):
            for source in sources:
                if source and len(chosen) < free:
                    chosen.append(source.pop(0))
        for candidate in sampled:  # the sampler's asks that found no slot
            for trial in [candidate.trial, *candidate.waiting]:
                if trial is None:
                    continue
                if candidate.predicted_us is not None and math.isfinite(candidate.predicted_us):
                    trial.report(candidate.predicted_us, step=0)
                trial.set_user_attr("ranked_out", True)
                study.tell(trial, state=TrialState.PRUNED)
        return chosen

    def _predict(self, candidates: list[_Candidate]) -> None:
        for candidate in candidates:
            if candidate.predicted_us is not None:
                continue
            try:
                candidate.predicted_us = float(self._estimator(candidate.sprogram))
            except Exception as exc:
                logger.debug("cost model failed on %s: %s", candidate.sprogram.hash[:12], exc)

    def _valid_candidate(
        self, choices: Choices, source: str, taken: set[str]
    ) -> _Candidate | None:
        try:
            sprogram, validity = self.space.build(choices)
        except Exception:
            return None
        if not validity.ok or sprogram.hash in taken:
            return None
        taken.add(sprogram.hash)
        return _Candidate(None, sprogram.choices, sprogram, source)

    def _local_candidates(self, taken: set[str]) -> list[_Candidate]:
        """Unmeasured valid neighbours of the ``local_top`` best measured schedules, best
        predicted first (ties in a seeded random order)."""
        best = sorted((r for r in self._measured.values() if r.ok),
                      key=lambda r: r.latency_us or 0.0)[: self.config.local_top]
        found: list[_Candidate] = []
        taken = set(taken)
        for record in best:
            for choices in neighbours(self.space, record.choices):
                candidate = self._valid_candidate(choices, SOURCE_LOCAL, taken)
                if candidate is not None:
                    found.append(candidate)
        self._predict(found)
        ties = {c.sprogram.hash: self._rng.random() for c in found}
        found.sort(key=lambda c: (_by_prediction(c), ties[c.sprogram.hash]))
        return found

    def _model_candidates(self, taken: set[str], samples: int) -> list[_Candidate]:
        """The cost model's ranking of ``samples`` random valid unmeasured schedules."""
        found: list[_Candidate] = []
        taken = set(taken)
        trial = _RandomTrial(self._rng)
        for _ in range(samples * 20):
            if len(found) >= samples:
                break
            candidate = self._valid_candidate(self.space.suggest(trial), SOURCE_MODEL, taken)
            if candidate is not None:
                found.append(candidate)
        self._predict(found)
        found.sort(key=_by_prediction)
        return found

    def _rank(self, study: optuna.Study, pool: list[_Candidate], free: int) -> list[_Candidate]:
        """Predict every candidate; priority sources first (in the order they were
        enqueued), then the best predicted. Priority candidates without room wait for the
        next batch; the rest are pruned."""
        for candidate in pool:
            if candidate.predicted_us is not None:
                continue
            try:
                candidate.predicted_us = float(self._estimator(candidate.sprogram))
            except Exception as exc:
                logger.debug("cost model failed on %s: %s", candidate.sprogram.hash[:12], exc)
                candidate.predicted_us = None
        pool.sort(  # priority sources in the order they were given; the rest by prediction
            key=lambda c: (
                c.priority,
                0.0 if c.priority < len(PRIORITY_SOURCES) else (
                    c.predicted_us if c.predicted_us is not None else math.inf
                ),
                c.trial.number if c.trial is not None else 0,
            )
        )
        chosen, rest = pool[:free], pool[free:]
        for candidate in rest:
            if candidate.priority < len(PRIORITY_SOURCES):
                self._carry.append(candidate)
                continue
            for trial in [candidate.trial, *candidate.waiting]:
                if candidate.predicted_us is not None and math.isfinite(candidate.predicted_us):
                    trial.report(candidate.predicted_us, step=0)
                trial.set_user_attr("ranked_out", True)
                study.tell(trial, state=TrialState.PRUNED)
        return chosen

    def _record(
        self, candidate: _Candidate, result: MeasurementLike | None, error: str = ""
    ) -> TrialRecord:
        number = candidate.trial.number if candidate.trial is not None else -1
        if result is None:
            return TrialRecord(
                number=number,
                choices=candidate.choices,
                status=CODEGEN_ERROR,
                source=candidate.source,
                schedule_hash=candidate.sprogram.hash,
                predicted_us=candidate.predicted_us,
                error=error,
                schedule=candidate.sprogram.to_dict(),
            )
        status = str(getattr(result.status, "value", result.status))
        ok = status == "ok" and result.latency_us is not None
        return TrialRecord(
            number=number,
            choices=candidate.choices,
            status=status,
            source=candidate.source,
            schedule_hash=candidate.sprogram.hash,
            latency_us=float(result.latency_us) if ok else None,
            predicted_us=candidate.predicted_us,
            error=result.error,
            simulated=bool(result.simulated),
            measurement=result.to_dict(),
            schedule=candidate.sprogram.to_dict(),
        )

    def _remember(self, record: TrialRecord) -> None:
        """Count a measured record against the budget and track the best."""
        if record.status == INVALID:  # only history comes here; new ones count when asked
            self._invalid += 1
            return
        if record.schedule_hash is None or record.schedule_hash in self._measured:
            return
        self._measured[record.schedule_hash] = record
        self._trials_done += 1
        if record.ok and (
            self._best is None
            or record.latency_us < self._best.latency_us  # type: ignore[operator]
        ):
            self._best = record
            self._since_improvement = 0
            self._curve.append((record.elapsed_s or 0.0, float(record.latency_us)))  # type: ignore[arg-type]
        else:
            self._since_improvement += 1

    @staticmethod
    def _tell_measured(study: optuna.Study, trial: optuna.Trial, record: TrialRecord) -> None:
        if record.ok:
            study.tell(trial, record.latency_us)
        else:
            trial.set_user_attr("error", f"{record.status}: {record.error}"[:500])
            study.tell(trial, state=TrialState.FAIL)

    def _enqueue(self, study: optuna.Study, seeds: Sequence[Choices], source: str) -> None:
        for choices in seeds:
            fitted = fit_to_space(self.space, choices)
            if fitted:
                study.enqueue_trial(fitted, user_attrs={_SOURCE_ATTR: source}, skip_if_exists=True)

    def _poll_seeds(self, study: optuna.Study) -> None:
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
            self._enqueue(study, seeds, SOURCE_COST_MODEL)

    # ----- end of the search -------------------------------------------------------------
    def _retime(self) -> list[TrialRecord]:
        """Re-time the top-k interleaved (with the reference job, then the peer jobs, in
        one call); finalists by re-timed latency, fastest first."""
        ranked = sorted(
            (r for r in self._measured.values() if r.ok), key=lambda r: r.latency_us or 0.0
        )
        top: list[tuple[TrialRecord, Any]] = []
        for record in ranked:
            if len(top) == self.config.retime_top_k:
                break
            program = self._program(record)
            if program is None:
                continue
            try:
                top.append((record, self.make_final_job(program)))
            except Exception as exc:
                logger.warning("no re-timing job for %s: %s", record.schedule_hash, exc)
        if not top:
            return []
        self._progress("retime")
        jobs = [job for _, job in top]
        if self._reference_job is not None:
            jobs.append(self._reference_job)
        jobs.extend(self._peer_jobs.values())
        results = list(self.executor.retime_interleaved(jobs, rounds=self.config.retime_rounds))
        baselines = results[len(top):]
        if self._reference_job is not None:
            self._reference = baselines.pop(0)
        self._peers = dict(zip(self._peer_jobs, baselines, strict=True))
        finalists = []
        for (record, _), result in zip(top, results[: len(top)], strict=True):
            status = str(getattr(result.status, "value", result.status))
            if status == "ok" and result.latency_us is not None:
                finalists.append(
                    TrialRecord(
                        **{
                            **record.__dict__,
                            "latency_us": float(result.latency_us),
                            "measurement": result.to_dict(),
                            "schedule": record.schedule or self._programs[
                                record.schedule_hash  # type: ignore[index]
                            ].to_dict(),
                        }
                    )
                )
        finalists.sort(key=lambda r: r.latency_us or 0.0)
        return finalists

    # ----- helpers -----------------------------------------------------------------------
    def _program(self, record: TrialRecord) -> SProgram | None:
        """The sProgram of a measured record (rebuilt from its dict for history)."""
        digest = record.schedule_hash
        if digest is None:
            return None
        if digest not in self._programs and record.schedule is not None:
            try:
                self._programs[digest] = SProgram.from_dict(record.schedule)
            except (KeyError, TypeError, ValueError):
                return None
        return self._programs.get(digest)

    def _open_studies(self) -> tuple[optuna.Study, optuna.Study | None]:
        sampler = optuna.samplers.TPESampler(
            seed=self.config.seed,
            n_startup_trials=self.config.n_startup_trials,
            constant_liar=True,
        )
        study = optuna.create_study(direction="minimize", sampler=sampler)
        if self._storage is None:
            return study, None
        mirror = optuna.create_study(
            storage=self._storage,
            study_name=self._study_name,
            direction="minimize",
            load_if_exists=True,
        )
        done = [t for t in mirror.get_trials(deepcopy=False) if t.state.is_finished()]
        if done:
            study.add_trials(done)
        return study, mirror

    def _mirror(self, study: optuna.Study, mirror: optuna.Study | None, start: int) -> int:
        """Add the working study's finished trials from ``start`` on to the mirror.

        Only measured trials go by default: pruned ones (invalid points, candidates the
        cost model ranked out) and repeats of a measured schedule are most of the trials,
        each costs a few statements (about 45 ms on a local PostgreSQL), and the service
        records invalid points in its own table. ``config.mirror_pruned`` sends them all.
        """
        if mirror is None:
            return start
        trials: list[FrozenTrial] = study.get_trials(deepcopy=False)
        end = start
        while end < len(trials) and trials[end].state.is_finished():
            end += 1
        keep = [
            t
            for t in trials[start:end]
            if self.config.mirror_pruned
            or (t.state is not TrialState.PRUNED and not t.user_attrs.get(_DUPLICATE_ATTR))
        ]
        if keep:
            mirror.add_trials(keep)
        return end

    def _progress(self, phase: str, best: TrialRecord | None = None) -> None:
        best = best or self._best
        self._on_progress(
            Progress(
                phase=phase,
                trials_done=self._trials_done,
                trials_budget=self.budget.trials,
                invalid=self._invalid,
                best_latency_us=best.latency_us if best else None,
                best_schedule_hash=best.schedule_hash if best else None,
                elapsed_s=self._stopper.elapsed_s,
                reference_latency_us=_latency(self._reference),
            )
        )

    def _cost_model(self, sprogram: SProgram) -> float:
        from scheduler_search.cost_model import estimate

        return estimate(sprogram, self.space.spec, self.space.device).latency_us


class _RandomTrial:
    """A trial that picks every categorical at random (cheap samples of the space)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        del name
        return self.rng.choice(list(choices))


def _by_prediction(candidate: _Candidate) -> float:
    predicted = candidate.predicted_us
    return predicted if predicted is not None and math.isfinite(predicted) else math.inf


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


def _latency(result: MeasurementLike | None) -> float | None:
    if result is None or str(getattr(result.status, "value", result.status)) != "ok":
        return None
    return result.latency_us


def _describe_invalid(validity: Any) -> str:
    reason = validity.reason
    value = getattr(reason, "value", reason)
    detail = ""
    rejections = getattr(validity, "rejections", None)
    if rejections:
        first = rejections[0]
        detail = getattr(first, "detail", "") or getattr(first, "message", "")
    return f"{value}: {detail}" if detail else str(value)
