"""Tuning over a range of sizes: candidates measured at sampled sizes, cut into buckets.

A range run (``{"m": {"min": 1, "max": 16384}, "n": 4096, ...}``) does not look for one
best schedule but for a *bucket table*: contiguous buckets of the range's dimension, each
served by one kernel that takes the size at run time (``SProgram.runtime_dims``). No single
schedule is best everywhere (a GEMM with m = 1 wants narrow tiles, one with m = 16384 the
widest), and each bucket is one more kernel to compile and keep, so the search measures a
pool of candidates at every sampled size and lets :func:`~scheduler_search.search.buckets
.partition` choose.

:class:`RangeSearch` does, in order:

1. **Sizes**: ``RangeConfig.sizes`` sizes of the range (log-uniform, both ends included,
   seeded: :meth:`RangeSpec.sample`).
2. **Pool**: the hand-written designs and their stream-K variants first, then the cost
   model's best distinct structures at a few *anchor* sizes across the range (the ends,
   the geometric middle and the quarter points), taken in turns. An anchor's space is the
   exact spec's there, restricted to persistent schedules (a kernel that takes m at run
   time keeps its grid: codegen refuses the rest), ranked from random valid samples
   climbed to their best neighbours (or, with ``exhaustive``, the whole space). Every
   candidate is planned at the range's high end taking every dimension of the range axis
   at run time (``runtime_dims``: ``("m",)``; ``("seq_q", "seq_kv")`` for a tied
   self-attention range), and kept if the feasibility check accepts that sProgram. The
   pool is as wide as the first pass's trials allow (``trials // sizes``, at most
   ``max_pool``).
3. **Measurements**: every candidate at every size, a job per (candidate, size) made by
   the caller's ``make_jobs`` (one kernel rendered per candidate and bound to each size,
   so a GPU worker compiles each source once). The candidates go in groups as wide as a
   batch, each group size by size: a batch holds as many different kernels as the
   executor compiles at once, and a time budget cut leaves whole candidates measured
   over the whole range.
4. **Refining**: the pool's pass takes three quarters of the trials (``refine_share``);
   the rest goes to rounds that measure the contenders (within ``CONTENDER_SLACK`` of
   the best at either end) at the geometric middle of the widest gaps between measured
   sizes where the winner or the best time changes: where a kernel's tiles spill into
   another wave, which estimates between samples miss.
5. **Buckets**: the measured sizes, with estimates between them, cut into buckets
   (:class:`~scheduler_search.search.range_cut.RangeCut`); each bucket's winner is then
   re-timed interleaved at the bucket's sizes (``retime_rounds``; skipped when
   cancelled).

The search stops on its :class:`Budget` (``trials`` counts measurements, ``seconds`` the
wall clock, the re-timing coming after it, as in :class:`SearchDriver`) or a cancel. A
resumed run hands in its stored measurements (``history``): they count, and are never
measured again; the plan (sizes, pool) is the same for the same seed and budget, and a
larger budget's pool starts with the smaller one's.

Like the driver, this imports no executor, GPU, database or code generator: jobs come from
``make_jobs``, the code generator's check from ``feasible``, records leave through
callbacks.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from scheduler_search.hardware.model import Device
from scheduler_search.ops import OperatorSpec, RangeSpec, parse_spec
from scheduler_search.search.buckets import BucketTable
from scheduler_search.search.executor import ExecutorLike, MeasurementLike, status_of
from scheduler_search.search.measuring import Batch, JobFailure, MeasuringLoop, make_job
from scheduler_search.search.range_cut import RangeCut
from scheduler_search.search.range_pool import Estimator, RangeCandidate, RangePool
from scheduler_search.search.range_refine import RefinePlanner
from scheduler_search.search.records import (
    CODEGEN_ERROR,
    Progress,
    SearchCallbacks,
    TrialRecord,
)
from scheduler_search.search.stopping import Budget, Stopper, StopReason
from scheduler_search.space import Choices, Feasibility
from scheduler_search.sprogram import SProgram, plan_sprogram

logger = logging.getLogger(__name__)

#: Knobs held for a kernel that takes a size at run time: its grid is planned once, so it
#: loops over the tiles of whatever size it is given (``codegen.unsupported`` refuses a
#: run-time size on a grid of one block per tile).
RUNTIME_FIXED: Choices = {"persistent": True}

#: Rounds of measuring the buckets' kernels where they won a sampled size on an estimate
#: (:meth:`RangeSearch._confirm`). A 1920 x 1088 weight's table (H200, 2026-12-04) served
#: m = 9778..12609 with a swapped tile estimated from m = 8685, where it ran 1.22x the
#: best, to beat the measured kernels at 11929; re-timed there it ran 1.25x the best, and
#: m = 10090 at 0.79 of cuBLAS's speed.
CONFIRM_ROUNDS = 3

#: ``make_jobs(sprogram, sizes, final)``: one job per size (``{dim: size}`` for every
#: dimension of the range axis, ``RangeSpec.at``) of the
#: candidate ``sprogram`` (planned at the range's high end, with ``runtime_dims``), timed
#: by the search's quick method or (``final``) the re-timing's.
MakeJobs = Callable[[SProgram, Sequence[Mapping[str, int]], bool], Sequence[Any]]


@dataclass(frozen=True)
class RangeConfig:
    """Knobs of a range search.

    Args:
        seed: seeds the sampled sizes and the anchors' random samples.
        sizes: sizes measured (fewer when the budget cannot give ``min_candidates``
            candidates that many, never fewer than 2 unless the range has one size).
        pool: candidates of a default budget (``default_trials`` is ``pool * sizes``
            over the first pass's share). A GEMM range over m from a few tokens to
            thousands starts with 36-38 designs (the operator's and its stream-K twins,
            its weight's decode and middle tiles, the range designs): 24 left no room
            for a cost-model pick and cut the widest swapped tiles.
        max_pool: the most candidates a larger budget buys.
        min_candidates: candidates the sizes leave room for in a small budget.
        anchors: sizes across the range whose spaces the cost model ranks.
        samples_per_anchor: random valid schedules drawn at each anchor.
        climb_rounds: rounds of moving an anchor's best few to their best neighbours
            (one knob changed) by the cost model.
        climb_top: how many of an anchor's best are climbed from per round.
        exhaustive: rank an anchor's whole space instead (seconds per anchor for a GEMM).
        batch_size: jobs per ``measure`` call (default: the executor's ``batch_size()``).
        retime_rounds: interleaved rounds re-timing the buckets' winners (0: none).
        max_buckets, tolerance: ``buckets.partition``'s. An H200 GEMM table over
            m = 1..16384 wants many (each wave plateau of each tile its own): a cap of
            twelve once served m = 673..800 with a kernel in two waves where another
            held it in one (estimated 40 against 46-48 us).
        size_tolerance: ``partition``'s: how much slower than the best candidate
            any one size may be served (unless the least-loss table does no better). A
            table within 1% overall once served m = 1857..2588 with one stream-K kernel
            at up to 1.083 of the best, m = 2484 at 0.79 of cuBLAS; the wave plateaus
            of the swapped tiles (200, 208, 216, ... rows: three waves each up to its
            own m) want their own buckets there. Re-cut from the same H200 measurements
            with 0.05, fp16 took 24 buckets at a cap of 24 (every bucket within 1.031 of
            the best) and 28 at a cap of 32 (within 1.012): the last few buckets buy
            about 1% at a few sizes, and a larger table shares the run's budget among
            more kernels.
        estimated_sizes: sizes spread over the range (log-spaced) at which, besides the
            sampled ones, each candidate's time is estimated before the range is cut:
            its nearest measurement scaled by the cost model's ratio between the two
            sizes. A kernel's time jumps between samples where its tiles spill into
            another wave (an H200 GEMM table cut at m = 213 and 512 served m = 260 and
            522 at 0.4-0.5 of cuBLAS with a kernel that was the best at both samples);
            0: cut at the sampled sizes only.
        refine_rounds, refine_sizes, refine_share: rounds of measuring the contenders
            at the geometric middle of up to ``refine_sizes`` gaps between measured sizes
            where something changes (the winner, or the best time by more than
            ``REFINE_STEP``), widest gaps first, with ``refine_share`` of the trial budget
            kept for them. The cost model misjudges exactly there: on an H200 the
            estimates served m = 522 at 0.33 of cuBLAS (a 256-wide tile in a second wave)
            and m = 1700 at 0.68 (stream-K where whole tiles fit two waves).
    """

    seed: int = 0
    sizes: int = 10
    pool: int = 40
    max_pool: int = 96
    min_candidates: int = 4
    anchors: int = 5
    samples_per_anchor: int = 128
    climb_rounds: int = 2
    climb_top: int = 4
    exhaustive: bool = False
    batch_size: int | None = None
    retime_rounds: int = 3
    max_buckets: int = 24
    tolerance: float = 0.01
    size_tolerance: float = 0.05
    estimated_sizes: int = 48
    refine_rounds: int = 3
    refine_sizes: int = 6
    refine_share: float = 0.25

    @property
    def default_trials(self) -> int:
        """The trial budget of a range run whose request gives none: ``pool`` candidates
        at every size, and the refining rounds' share on top."""
        first_pass = self.pool * self.sizes
        if self.refine_rounds <= 0:
            return first_pass
        return math.ceil(first_pass / (1.0 - self.refine_share))


@dataclass(frozen=True)
class RangeBucketResult:
    """Sizes ``low``..``high`` served by ``candidate``: ``loss`` times the best measured
    at the bucket's sampled sizes (``samples``); ``latencies_us`` its latency at every
    sampled size it ran at (the search's timing), ``retimed_us`` at the bucket's sizes by
    the final method (None: not re-timed)."""

    low: int
    high: int
    loss: float
    samples: tuple[int, ...]
    candidate: RangeCandidate
    latencies_us: dict[int, float]
    retimed_us: dict[int, float] | None = None

    @property
    def sprogram(self) -> SProgram:
        return self.candidate.sprogram

    @property
    def schedule_hash(self) -> str:
        return self.candidate.sprogram.hash


@dataclass
class RangeResult:
    """The outcome of a range search.

    ``buckets`` is empty when nothing ran (every candidate failed, or the budget or a
    cancel left no size measured); ``measurements`` are this attempt's records (a
    resumed run's history not included); ``trials_done`` counts both.
    """

    dim: str
    low: int
    high: int
    size_from: tuple[str, int]
    sizes: list[int]
    candidates: list[RangeCandidate]
    buckets: tuple[RangeBucketResult, ...]
    measurements: list[TrialRecord]
    trials_done: int
    invalid: int
    stop_reason: StopReason
    elapsed_s: float
    loss: float | None = None
    cancelled: bool = False
    #: The dimensions tied to ``dim`` (taking its size), each with where a call reads it
    #: (``(("seq_kv", "k", 1),)`` for self-attention; empty for one dimension).
    tied: tuple[tuple[str, str, int], ...] = ()

    @property
    def ok(self) -> bool:
        return bool(self.buckets)

    @property
    def dims(self) -> tuple[str, ...]:
        """Every dimension of the range axis, ``dim`` first."""
        return (self.dim, *(name for name, _, _ in self.tied))


def range_dim(range_spec: RangeSpec) -> str:
    """The primary dimension of ``range_spec``'s range axis (the one a bucket table's
    sizes and the trials' choices are named by)."""
    return range_spec.dim


def range_dims(range_spec: RangeSpec) -> tuple[str, ...]:
    """Every dimension of the range axis, the primary first (several when tied: each
    candidate takes them all at run time, each size sets them all)."""
    return range_spec.dims


def size_source(range_spec: RangeSpec, dim: str) -> tuple[str, int]:
    """Where a call's size of ``dim`` is read: the first input tensor of the operator's
    contract (``tensors()``) whose shape changes with ``dim`` alone (the other range
    dimensions held), and the axis that does (``("a", 0)`` for a GEMM's m; attention's
    ``("q", 1)`` for seq_q, ``("k", 1)`` for seq_kv in the bshd layout).

    Raises:
        ValueError: no input's shape depends on ``dim``.
    """
    size_range = range_spec.ranges[dim]
    pairs = [(size_range.low, size_range.high)] if size_range.low != size_range.high else []
    pairs += [(size_range.low, size_range.low + 1), (size_range.low, 2 * size_range.low)]
    held = {**range_spec.fixed, **range_spec.at(size_range.low)}
    for a, b in pairs:
        try:
            first = parse_spec(range_spec.op, {**held, dim: a}).tensors()
            second = parse_spec(range_spec.op, {**held, dim: b}).tensors()
        except ValueError:  # a size the operator refuses: try the next pair
            continue
        for one, other in zip(first, second, strict=True):
            if one.role != "input" or one.shape == other.shape:
                continue
            for axis, (x, y) in enumerate(zip(one.shape, other.shape, strict=True)):
                if x != y:
                    return one.name, axis
    raise ValueError(f"no input of {range_spec.op} changes shape with {dim}")


def tied_sources(range_spec: RangeSpec) -> tuple[tuple[str, str, int], ...]:
    """Each dimension tied to the primary with where a call reads it (``(dim, tensor,
    axis)``; empty for a range of one dimension)."""
    return tuple((name, *size_source(range_spec, name)) for name in range_spec.dims[1:])


def plan_at(range_spec: RangeSpec, device: Device, sprogram: SProgram,
            sizes: Mapping[str, int]) -> SProgram:
    """``sprogram``'s choices planned at ``sizes`` (its ``runtime_dims`` kept): what the
    cost model times for the kernel at that size (a simulated measurement, a prediction).

    Raises:
        ScheduleError, SpecError: the choices cannot be planned there.
    """
    spec = range_spec.exact(dict(sizes))
    return replace(plan_sprogram(spec, device, sprogram.choices),
                   runtime_dims=sprogram.runtime_dims)


class RangeSearch:
    """Measures a pool of run-time-size schedules over a range and cuts it into buckets
    (see the module docstring).

    Args:
        range_spec: the workload, with one range axis (one dimension, or several tied).
        device: the device model (spaces, plans and the default estimator).
        executor: measures batches (``batch_size``, ``prepare``, ``retime_interleaved``).
        make_jobs: the jobs of a candidate at sizes (:data:`MakeJobs`); what code
            generation raises for a schedule it cannot write
            (:data:`~scheduler_search.search.measuring.JOB_ERRORS`) is each of those
            measurements' failure (``render_error``), not the search's.
        budget: ``trials`` (measurements) and ``seconds``; ``patience`` is not used.
        config: the knobs (:class:`RangeConfig`).
        feasible: the code generator's check, asked of each anchor's schedules and of
            each candidate with its run-time dimension (None: every valid schedule).
        estimator: predicted latency of an sProgram on a spec (default: the cost model).
        designs: hand-written designs' choices, tried first (with their stream-K
            variants).
        fixed: knobs held in every space (default :data:`RUNTIME_FIXED`).
        history: an earlier attempt's records (sizes in their choices): counted, never
            measured again.
        elapsed_before_s: time the earlier attempt spent (counts against ``seconds``).
        callbacks: each batch's records and progress to the caller, and whether to stop
            (:class:`~scheduler_search.search.records.SearchCallbacks`).
    """

    def __init__(
        self,
        range_spec: RangeSpec,
        device: Device,
        executor: ExecutorLike,
        make_jobs: MakeJobs,
        *,
        budget: Budget | None = None,
        config: RangeConfig | None = None,
        feasible: Feasibility | None = None,
        estimator: Estimator | None = None,
        designs: Sequence[Choices] = (),
        fixed: Choices | None = None,
        history: Sequence[TrialRecord] = (),
        elapsed_before_s: float = 0.0,
        callbacks: SearchCallbacks | None = None,
    ) -> None:
        self.range_spec = range_spec
        self.dim = range_dim(range_spec)
        self.dims = range_dims(range_spec)
        self.size_range = range_spec.axis
        self.device = device
        self.executor = executor
        self.make_jobs = make_jobs
        self.budget = budget or Budget(trials=(config or RangeConfig()).default_trials)
        self.config = config or RangeConfig()
        self.feasible = feasible
        self.estimator = estimator or _cost_model(device)
        self.designs = [dict(d) for d in designs]
        self.fixed = dict(RUNTIME_FIXED if fixed is None else fixed)
        self._callbacks = callbacks or SearchCallbacks()
        self._stopper = Stopper(self.budget, elapsed_before_s=elapsed_before_s)
        #: (schedule hash, size) -> the latest record of that measurement.
        self._known: dict[tuple[str, int], TrialRecord] = {}
        for record in history:
            size = record.choices.get(self.dim)
            if record.schedule_hash is not None and isinstance(size, int):
                self._known[(record.schedule_hash, size)] = record
        self._trials_done = len(history)
        self._measured: list[TrialRecord] = []
        self._pool = RangePool(range_spec, device, self.config, self.dims, self.fixed,
                               self.designs, feasible, self.estimator)
        self._jobs: dict[tuple[int, bool, tuple[int, ...]], list[Any] | JobFailure] = {}
        #: (schedule hash, size) -> the estimator's latency there (None: no estimate).
        self._predicted: dict[tuple[str, int], float | None] = {}
        self.cut = RangeCut(self.size_range, self.dim, self.config, self._latency,
                            lambda c, size: (c.sprogram.hash, size) in self._known,
                            self._predict)
        self.refiner = RefinePlanner(self._latency, self._measured_at, self._predict,
                                     self.config.refine_sizes)

    # ----- the plan ------------------------------------------------------------------------
    def plan_sizes(self) -> list[int]:
        """The sizes to measure at: ``config.sizes``, fewer when the budget cannot give
        ``min_candidates`` candidates that many."""
        count = self.config.sizes
        floor = max(1, self.config.min_candidates)
        if self.budget.trials < floor * count:
            count = max(2, self.budget.trials // floor)
        sampled = self.range_spec.sample(count, self.config.seed)
        return [s[self.dim] for s in sampled]

    def pool_size(self, sizes: int) -> int:
        """Candidates the trial budget measures at ``sizes`` sizes (at most ``max_pool``)."""
        return max(1, min(self.config.max_pool, self.pool_trials() // max(1, sizes)))

    def plan_pool(self, count: int) -> list[RangeCandidate]:
        """Up to ``count`` candidates (:meth:`RangePool.plan`)."""
        return self._pool.plan(count)

    # ----- the search ----------------------------------------------------------------------
    def run(self) -> RangeResult:
        """Plan, measure, partition, re-time; the outcome."""
        sizes = self.plan_sizes()
        self._progress("starting")
        candidates = self.plan_pool(self.pool_size(len(sizes)))
        logger.info("range search of %s %s: %d candidates at %d sizes (%d refused)",
                    self.range_spec.op, self.range_spec.params(), len(candidates), len(sizes),
                    self._pool.invalid)
        reason = self._measure_all(candidates, sizes)
        logger.info("range search: %d measurements in %.1f s (%s)", self._trials_done,
                    self._stopper.elapsed_s, reason.value)
        if reason in (StopReason.TRIALS, StopReason.EXHAUSTED):
            sizes, reason = self._refine(candidates, sizes, reason)
        cancelled = reason is StopReason.CANCELLED
        started_s = time.perf_counter()
        table, measured_sizes = self.cut.cut(candidates, sizes)
        if not cancelled:
            table, measured_sizes = self._confirm(table, candidates, sizes, measured_sizes)
        buckets = self._buckets(table, candidates, measured_sizes)
        logger.info("range search: cut into %d buckets in %.1f s", len(buckets),
                    time.perf_counter() - started_s)
        if buckets and not cancelled and self.config.retime_rounds > 0:
            self._progress("retime")
            started_s = time.perf_counter()
            buckets = self._retime(buckets)
            logger.info("range search: re-timed the buckets' kernels at %d sizes in %.1f s",
                        sum(len(b.samples) for b in buckets), time.perf_counter() - started_s)
        self._progress("done")
        return RangeResult(
            dim=self.dim,
            low=self.size_range.low,
            high=self.size_range.high,
            size_from=size_source(self.range_spec, self.dim),
            tied=tied_sources(self.range_spec),
            sizes=sizes,
            candidates=candidates,
            buckets=tuple(buckets),
            measurements=list(self._measured),
            trials_done=self._trials_done,
            invalid=self._pool.invalid,
            stop_reason=reason,
            elapsed_s=self._stopper.elapsed_s,
            loss=table.loss if table is not None else None,
            cancelled=cancelled,
        )

    def _confirm(self, table: BucketTable | None, candidates: list[RangeCandidate],
                 sizes: list[int], measured_sizes: list[int]
                 ) -> tuple[BucketTable | None, list[int]]:
        """Rounds (at most :data:`CONFIRM_ROUNDS`) of measuring each bucket's kernel at
        the bucket's sampled sizes it won on an estimate alone, then cutting again: a
        bucket is never served on a predicted ratio where a measurement could say
        otherwise. The trials come from those the refining rounds left
        (:meth:`confirm_trials` of them are kept for this)."""
        for _ in range(CONFIRM_ROUNDS):
            if table is None:
                break
            wanted = {(candidates[b.choice].index, s) for b in table.buckets
                      for s in measured_sizes if b.low <= s <= b.high
                      and (candidates[b.choice].sprogram.hash, s) not in self._known}
            if not wanted or self._stopper.remaining_trials(self._trials_done) <= 0:
                break
            unconfirmed = [candidates[i] for i in sorted({i for i, _ in wanted})]
            before = self._trials_done
            self._measure_all(unconfirmed, sorted({s for _, s in wanted}), wanted=wanted)
            if self._trials_done == before:  # out of time: cutting again changes nothing
                break
            logger.info("range search: confirmed %d estimated bucket sizes, %d measurements",
                        len(wanted), self._trials_done)
            table, measured_sizes = self.cut.cut(candidates, sizes)
        return table, measured_sizes

    def confirm_trials(self) -> int:
        """Trials the refining rounds leave for the confirmations after the cut: a
        quarter of theirs, at most one a bucket."""
        refining = self.budget.trials - self.pool_trials()
        return min(self.config.max_buckets, refining // 4)

    def pool_trials(self) -> int:
        """Trials of the first pass over the sampled sizes (the rest refines)."""
        if self.config.refine_rounds <= 0:
            return self.budget.trials
        return max(1, int(self.budget.trials * (1.0 - self.config.refine_share)))

    def _refine(self, candidates: list[RangeCandidate], sizes: list[int],
                reason: StopReason) -> tuple[list[int], StopReason]:
        """Rounds of measuring the contenders at the middles of the gaps where the
        winner or the best time changes (:meth:`RefinePlanner.gaps`); all sizes measured
        so far, sorted, and why the measuring stopped."""
        kept = self.confirm_trials()
        for _ in range(self.config.refine_rounds):
            if self._stopper.remaining_trials(self._trials_done) <= kept:
                break
            middles = self.refiner.gaps(candidates, sizes)
            if not middles:
                break
            wanted = {(c.index, middle) for middle, contenders in middles for c in contenders}
            union = sorted({c.index: c for _, cs in middles for c in cs}.values(),
                           key=lambda c: c.index)
            reason = self._measure_all(union, sorted(m for m, _ in middles), wanted=wanted,
                                       keep=kept)
            sizes = sorted({*sizes, *(m for m, cs in middles
                                      if any(self._latency(c, m) is not None for c in cs))})
            logger.info("range search: refined at %s (%d contenders), %d measurements in "
                        "%.1f s", sorted(m for m, _ in middles), len(union),
                        self._trials_done, self._stopper.elapsed_s)
            if reason not in (StopReason.TRIALS, StopReason.EXHAUSTED):
                break
        return sizes, reason

    def _measure_all(self, candidates: list[RangeCandidate], sizes: list[int], *,
                     wanted: set[tuple[int, int]] | None = None, keep: int = 0
                     ) -> StopReason:
        """Every (candidate, size) not measured yet (only the ``wanted`` (candidate
        index, size) pairs when given), in batches measured by
        :class:`~scheduler_search.search.measuring.MeasuringLoop` (the next batch's jobs
        prepared while one is measured), leaving ``keep`` trials of the budget unspent;
        why it stopped. Without ``wanted`` the time budget waits until some candidate has
        run at every size."""
        width = max(1, self.config.batch_size or self.executor.batch_size())
        pending = [(c, i) for start in range(0, len(candidates), width)
                   for i in range(len(sizes))
                   for c in candidates[start : start + width]
                   if (c.sprogram.hash, sizes[i]) not in self._known
                   and (wanted is None or (c.index, sizes[i]) in wanted)]
        batches = _RangeBatches(self, candidates, sizes, pending, width,
                                waits_for_every_size=wanted is None, keep=keep)
        return MeasuringLoop(self.executor, overlap=True).run(batches)

    def _every_size_ran(self, candidates: list[RangeCandidate], sizes: list[int]) -> bool:
        """Whether some candidate has run at every size."""
        return all(any(self._latency(c, s) is not None for c in candidates) for s in sizes)

    def _job(self, candidate: RangeCandidate, size_index: int, sizes: list[int], *,
             final: bool) -> Any:
        """The job of ``candidate`` at ``sizes[size_index]`` (its jobs at every size made
        once), or the :class:`JobFailure` of making them (each of its measurements')."""
        key = (candidate.index, final, tuple(sizes))
        if key not in self._jobs:
            def make() -> list[Any]:
                made = list(self.make_jobs(candidate.sprogram,
                                           [self.range_spec.at(s) for s in sizes], final))
                if len(made) != len(sizes):
                    raise ValueError(f"make_jobs gave {len(made)} jobs for {len(sizes)} sizes")
                return made

            self._jobs[key] = make_job(make, candidate.sprogram.hash[:12])
        jobs = self._jobs[key]
        return jobs if isinstance(jobs, JobFailure) else jobs[size_index]

    def _record(self, candidate: RangeCandidate, size: int,
                result: MeasurementLike | JobFailure) -> TrialRecord:
        """A measurement's record: the candidate's choices with the size, its status."""
        common: dict[str, Any] = {
            "number": -1,
            "choices": {**candidate.choices, self.dim: size},
            "source": candidate.source,
            "schedule_hash": candidate.sprogram.hash,
            "predicted_us": self._predict(candidate, size),
            "elapsed_s": self._stopper.elapsed_s,
        }
        if isinstance(result, JobFailure):
            return TrialRecord(status=CODEGEN_ERROR, error=result.error, **common)
        return TrialRecord.measured(result, **common)

    def _predict(self, candidate: RangeCandidate, size: int) -> float | None:
        key = (candidate.sprogram.hash, size)
        if key not in self._predicted:
            sizes = self.range_spec.at(size)
            try:
                planned = plan_at(self.range_spec, self.device, candidate.sprogram, sizes)
                self._predicted[key] = float(self.estimator(planned,
                                                            self.range_spec.exact(sizes)))
            except ValueError:
                self._predicted[key] = None
        return self._predicted[key]

    def _measured_at(self, candidate: RangeCandidate) -> dict[int, float]:
        """``candidate``'s measured latency at each size it ran at."""
        return {s: us for (h, s), record in self._known.items()
                if h == candidate.sprogram.hash and record.ok
                and (us := record.latency_us) is not None}

    def _latency(self, candidate: RangeCandidate, size: int) -> float | None:
        record = self._known.get((candidate.sprogram.hash, size))
        return record.latency_us if record is not None and record.ok else None

    def _buckets(self, table: BucketTable | None, candidates: list[RangeCandidate],
                 sizes: list[int]) -> list[RangeBucketResult]:
        if table is None:
            return []
        found = []
        for bucket in table.buckets:
            candidate = candidates[bucket.choice]
            latencies = {s: us for s in sizes if (us := self._latency(candidate, s)) is not None}
            samples = tuple(s for s in sizes if bucket.low <= s <= bucket.high)
            found.append(RangeBucketResult(bucket.low, bucket.high, bucket.loss, samples,
                                           candidate, latencies))
        return found

    def _retime(self, buckets: list[RangeBucketResult]) -> list[RangeBucketResult]:
        """Each bucket's winner timed again at the bucket's sizes, in interleaved rounds
        with the other buckets' (a failed re-timing leaves that size out)."""
        jobs: list[Any] = []
        owners: list[tuple[int, int]] = []
        for b, bucket in enumerate(buckets):
            sizes = [self.range_spec.at(s) for s in bucket.samples]
            made = make_job(lambda program=bucket.sprogram, sizes=sizes: self.make_jobs(
                program, sizes, True), f"re-timing {bucket.schedule_hash[:12]}")
            if isinstance(made, JobFailure):
                continue
            jobs.extend(made)
            owners.extend((b, s) for s in bucket.samples)
        if not jobs:
            return buckets
        results = self.executor.retime_interleaved(jobs, rounds=self.config.retime_rounds)
        retimed: dict[int, dict[int, float]] = {}
        for (b, size), result in zip(owners, results, strict=True):
            if status_of(result) == "ok" and result.latency_us is not None:
                retimed.setdefault(b, {})[size] = float(result.latency_us)
        return [replace(bucket, retimed_us=retimed.get(b, {}))
                for b, bucket in enumerate(buckets)]

    def _progress(self, phase: str) -> None:
        self._callbacks.on_progress(Progress(
            phase=phase,
            trials_done=self._trials_done,
            trials_budget=self.budget.trials,
            invalid=self._pool.invalid,
            best_latency_us=None,
            best_schedule_hash=None,
            elapsed_s=self._stopper.elapsed_s,
        ))


class _RangeBatches:
    """One pass of a range search's measurements as :class:`MeasuringLoop` walks them
    (its ``MeasuredSearch``): ``pending`` (candidate, size index) pairs in batches of
    ``width``, a batch cut to the trials the budget has left but ``keep``."""

    def __init__(self, search: RangeSearch, candidates: list[RangeCandidate],
                 sizes: list[int], pending: list[tuple[RangeCandidate, int]], width: int,
                 *, waits_for_every_size: bool, keep: int) -> None:
        self.search = search
        self.candidates = candidates
        self.sizes = sizes
        self.batches = [pending[i : i + width] for i in range(0, len(pending), width)]
        self.waits_for_every_size = waits_for_every_size
        self.keep = keep
        self.inflight = 0

    def _left(self) -> int:
        """Trials this pass may still start."""
        s = self.search
        return s._stopper.remaining_trials(s._trials_done + self.inflight) - self.keep

    def stop_reason(self) -> StopReason | None:
        s = self.search
        reason = s._stopper.reason(trials_done=s._trials_done + self.inflight,
                                   since_improvement=0, cancelled=self.cancelled())
        if (reason is StopReason.SECONDS and self.waits_for_every_size
                and not s._every_size_ran(self.candidates, self.sizes)):
            # A table cut over part of the range serves the rest with a kernel chosen
            # elsewhere (an H200 bf16 run whose first batches were still compiling
            # when 40 s were up measured 3 of 10 sizes and served 4..16384 with a
            # 64x64 tile at 0.4-0.6 of cuBLAS): time waits for one kernel per size.
            reason = None
        if reason is None and self.batches and self._left() <= 0:
            reason = StopReason.TRIALS
        if reason is None and not self.batches:
            done = s._trials_done + self.inflight >= s.budget.trials
            reason = StopReason.TRIALS if done else StopReason.EXHAUSTED
        return reason

    def next_batch(self) -> Batch[tuple[RangeCandidate, int]]:
        chosen = self.batches.pop(0)[: self._left()]
        self.inflight += len(chosen)
        return Batch([((c, i), self.search._job(c, i, self.sizes, final=False))
                      for c, i in chosen])

    def cancelled(self) -> bool:
        return self.search._callbacks.should_stop()

    def drop(self, batch: Batch[tuple[RangeCandidate, int]]) -> None:
        self.inflight -= len(batch)

    def complete(self, batch: Batch[tuple[RangeCandidate, int]],
                 results: list[tuple[tuple[RangeCandidate, int], MeasurementLike | JobFailure]]
                 ) -> list[TrialRecord]:
        s = self.search
        records = [s._record(c, self.sizes[i], result) for (c, i), result in results]
        self.inflight -= len(records)
        s._trials_done += len(records)
        s._measured.extend(records)
        for record in records:
            s._known[(record.schedule_hash or "", record.choices[s.dim])] = record
        return records

    def end_round(self, records: list[TrialRecord]) -> None:
        if records:
            self.search._callbacks.on_trials(records)
            self.search._progress("search")


def _cost_model(device: Device) -> Estimator:
    def estimate_us(sprogram: SProgram, spec: OperatorSpec) -> float:
        from scheduler_search.cost_model import estimate

        return estimate(sprogram, spec, device).latency_us

    return estimate_us


__all__ = [
    "RUNTIME_FIXED",
    "Estimator",
    "MakeJobs",
    "RangeBucketResult",
    "RangeCandidate",
    "RangeConfig",
    "RangeResult",
    "RangeSearch",
    "plan_at",
    "range_dim",
    "range_dims",
    "size_source",
    "tied_sources",
]
