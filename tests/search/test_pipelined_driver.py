"""The driver's GPU-run features with stand-ins: overlapped rounds (the next batch is asked
and prepared while the current one is measured), priority seeds that wait for room, the
cost model's seeds arriving late, a reference job measured first and re-timed with the
finalists, the leaders re-timed as the search goes, a job that cannot be made, and the
best-so-far curve."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
import pytest
from search_fakes import FakeMeasurement, FakeStatus, RecordingExecutor, TinySpace, latency_of

from scheduler_search.search import (
    SOURCE_COST_MODEL,
    SOURCE_DESIGN,
    SOURCE_WARM_START,
    Budget,
    SearchCallbacks,
    SearchConfig,
    SearchDriver,
    StopReason,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)

REFERENCE = "cublas"


@dataclass
class PipelineExecutor(RecordingExecutor):
    """A RecordingExecutor with ``prepare`` and a measurement that takes ``measure_s``
    (or, for the first ``hold_until_next_prepared - 1`` batches, lasts until the next
    batch is prepared, at most a minute: proves the overlap however slowly this machine
    asks a batch); keeps the order of events and which thread measured."""

    measure_s: float = 0.05
    batch: int = 4
    hold_until_next_prepared: int = 0
    events: list[tuple[str, int]] = field(default_factory=list)
    threads: set[str] = field(default_factory=set)
    prepared: list[list[Any]] = field(default_factory=list)
    lock: threading.Condition = field(default_factory=threading.Condition)

    def batch_size(self) -> int:
        return self.batch

    def prepare(self, jobs: Sequence[Any]) -> None:
        with self.lock:
            self.prepared.append(list(jobs))
            self.events.append(("prepare", len(self.prepared) - 1))
            self.lock.notify_all()

    def measure(self, jobs: Sequence[Any]) -> list[FakeMeasurement]:
        with self.lock:
            index = len(self.batches)
            self.events.append(("start", index))
        self.threads.add(threading.current_thread().name)
        if index + 1 < self.hold_until_next_prepared:
            with self.lock:
                self.lock.wait_for(lambda: len(self.prepared) > index + 1, timeout=60.0)
        else:
            time.sleep(self.measure_s)
        results = [self._ref() if job == REFERENCE else self._one(job) for job in jobs]
        with self.lock:
            self.batches.append([j for j in jobs])
            self.events.append(("end", index))
        return results

    def retime_interleaved(self, jobs: Sequence[Any], rounds: int = 3) -> list[FakeMeasurement]:
        self.retimed.append(list(jobs))
        return [self._ref() if job == REFERENCE else self._one(job) for job in jobs]

    @staticmethod
    def _ref() -> FakeMeasurement:
        return FakeMeasurement(FakeStatus("ok"), 11.0, simulated=False)

    @property
    def measured(self) -> list[Any]:
        return [job for batch in self.batches for job in batch if job != REFERENCE]


def _driver(executor, space=None, **kwargs) -> SearchDriver:
    kwargs.setdefault("estimator", latency_of)
    return SearchDriver(space or TinySpace(size=6), executor, lambda program: program, **kwargs)


def test_overlap_prepares_the_next_batch_before_the_current_one_is_measured() -> None:
    executor = PipelineExecutor(batch=4, measure_s=0.0, hold_until_next_prepared=4)
    result = _driver(executor, budget=Budget(trials=16),
                     config=SearchConfig(overlap=True, retime_top_k=2)).run()
    assert result.stop_reason is StopReason.TRIALS and result.trials_done == 16
    assert [len(b) for b in executor.batches] == [4, 4, 4, 4]
    assert len({p.hash for p in executor.measured}) == 16  # never the same schedule twice
    events = executor.events
    for i in range(1, 4):
        # Batch i is asked and prepared before batch i-1's measurement is over...
        assert events.index(("prepare", i)) < events.index(("end", i - 1))
        # ...and measured only after it.
        assert events.index(("end", i - 1)) < events.index(("start", i))
    assert all(name.startswith("pipetune-measure") for name in executor.threads)
    assert [len(p) for p in executor.prepared] == [4, 4, 4, 4]


def test_a_narrow_first_round_brings_the_first_seeds_back_alone() -> None:
    """The first round measures the first two seeds; the next ones are as wide as ever."""
    executor = PipelineExecutor(batch=4, measure_s=0.0)
    designs = [{"a": 1, "b": 2}, {"a": 1, "b": 3}, {"a": 2, "b": 2}]
    _driver(executor, designs=designs, budget=Budget(trials=10),
            config=SearchConfig(overlap=True, first_batch_size=2)).run()
    assert [len(b) for b in executor.batches] == [2, 4, 4]
    assert [dict(p.choices) for p in executor.batches[0]] == designs[:2]


def test_overlap_is_seeded_and_reproducible() -> None:
    def hashes() -> list[str]:
        executor = PipelineExecutor(batch=3, measure_s=0.0)
        _driver(executor, budget=Budget(trials=12),
                config=SearchConfig(seed=3, overlap=True)).run()
        return [p.hash for p in executor.measured]

    assert hashes() == hashes()


def test_priority_candidates_wait_for_room_in_order_of_source() -> None:
    executor = PipelineExecutor(batch=2, measure_s=0.0)
    warm = [{"a": 1, "b": 1}]
    designs = [{"a": 1, "b": 2}, {"a": 1, "b": 3}]
    records = []
    _driver(executor, warm_start=warm, designs=designs, budget=Budget(trials=8),
            config=SearchConfig(overlap=True),
            callbacks=SearchCallbacks(on_trials=records.extend)).run()
    first_three = [dict(p.choices) for p in executor.measured[:3]]
    assert first_three == [*warm, *designs]  # none was ranked out for want of room
    sources = {r.source for r in records}
    assert {SOURCE_WARM_START, SOURCE_DESIGN} <= sources


def test_late_cost_model_seeds_go_first_once_they_arrive() -> None:
    polls = []
    seeds = [{"a": 6, "b": 6}, {"a": 5, "b": 6}, {"a": 6, "b": 5}]

    def seed_source():
        polls.append(1)
        return seeds if len(polls) >= 3 else None  # ready at the third round

    executor = PipelineExecutor(batch=2, measure_s=0.0)
    records = []
    _driver(executor, seed_source=seed_source, budget=Budget(trials=12),
            callbacks=SearchCallbacks(on_trials=records.extend)).run()
    measured = [dict(p.choices) for p in executor.measured]
    assert measured[4:7] == seeds  # rounds 1-2 searched; the seeds come next, in order
    assert [r.source for r in records if r.status == "ok"][4:7] == [SOURCE_COST_MODEL] * 3
    assert len(polls) == 3  # not polled once the seeds came


def test_reference_job_is_timed_only_with_the_finalists() -> None:
    executor = PipelineExecutor(batch=3, measure_s=0.0)
    progress = []
    result = _driver(executor, reference_job=REFERENCE, budget=Budget(trials=6),
                     config=SearchConfig(overlap=True, retime_top_k=2),
                     callbacks=SearchCallbacks(on_progress=progress.append)).run()
    assert executor.batches and all(REFERENCE not in batch for batch in executor.batches)
    (retimed,) = executor.retimed
    assert retimed[-1] == REFERENCE and len(retimed) == 3
    assert result.reference is not None and result.reference.latency_us == 11.0
    assert progress[-1].reference_latency_us == 11.0 and len(result.finalists) == 2


def test_a_job_that_cannot_be_made_is_a_failed_trial() -> None:
    def make_job(program):
        if dict(program.choices)["a"] == 2:
            raise ValueError("unsupported tile")
        return program

    executor = PipelineExecutor(batch=4, measure_s=0.0)
    records = []
    result = SearchDriver(TinySpace(size=5), executor, make_job, estimator=latency_of,
                          budget=Budget(trials=6),
                          callbacks=SearchCallbacks(on_trials=records.extend)).run()
    # A renderer failure has its own status, not the compiler's compile_error.
    failed = [r for r in records if r.status == "render_error"]
    assert failed and all("codegen: ValueError: unsupported tile" in r.error for r in failed)
    assert all(dict(p.choices)["a"] != 2 for p in executor.measured)
    assert result.trials_done == 6 and result.best.choices["a"] != 2


def test_curve_is_the_best_so_far_with_search_times() -> None:
    executor = PipelineExecutor(batch=2, measure_s=0.01)
    result = _driver(executor, budget=Budget(trials=10), config=SearchConfig(overlap=True)).run()
    times = [t for t, _ in result.curve]
    latencies = [lat for _, lat in result.curve]
    assert result.curve and times == sorted(times) and times[0] > 0
    assert latencies == sorted(latencies, reverse=True) and len(set(latencies)) == len(latencies)
    assert latencies[-1] == min(latency_of(p) for p in executor.measured)


def test_mixed_batches_draw_on_the_sampler_the_neighbours_and_the_model() -> None:
    from scheduler_search.hardware import get_device
    from scheduler_search.ops import parse_spec
    from scheduler_search.search import SOURCE_LOCAL, SOURCE_MODEL, SOURCE_SEARCH
    from scheduler_search.space import ScheduleSpace
    from scheduler_search.sprogram import check_valid

    space = ScheduleSpace(parse_spec("gemm", {"m": 1024, "n": 1024, "k": 1024,
                                              "dtype": "float16"}), get_device("sim:h200"))

    def by_tile(sprogram) -> float:
        c = sprogram.choices
        return 100.0 + abs(c["tile_m"] - 128) + abs(c["tile_n"] - 128) / 2 + c["stages_ab"]

    def run(seed: int):
        executor = PipelineExecutor(batch=6, measure_s=0.0, latency=by_tile)
        records = []
        driver = SearchDriver(space, executor, lambda p: p, estimator=by_tile,
                              budget=Budget(trials=30),
                              config=SearchConfig(seed=seed, pool_factor=None,
                                                  sources=(SOURCE_LOCAL, SOURCE_SEARCH,
                                                           SOURCE_MODEL),
                                                  sampler_asks_per_slot=1, random_per_slot=2),
                                                  callbacks=SearchCallbacks(on_trials=records.extend))
        return driver.run(), executor, records

    result, executor, records = run(5)
    measured = executor.measured
    assert result.trials_done == 30 == len({p.hash for p in measured})
    assert all(check_valid(p, space.spec, space.device).ok for p in measured)
    sources = {r.source for r in records if r.status == "ok"}
    assert {SOURCE_LOCAL, SOURCE_MODEL, SOURCE_SEARCH} <= sources
    assert [p.hash for p in run(5)[1].measured] == [p.hash for p in measured]  # seeded


def test_neighbours_change_one_knob_and_walk_the_rest() -> None:
    from scheduler_search.hardware import get_device
    from scheduler_search.ops import parse_spec
    from scheduler_search.search import neighbours
    from scheduler_search.space import ScheduleSpace
    from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED

    space = ScheduleSpace(parse_spec("gemm", {"m": 1024, "n": 1024, "k": 1024,
                                              "dtype": "float16"}), get_device("sim:h200"))
    base = {**GEMM_WARP_SPECIALIZED, "raster_major": "m", "raster_swizzle": 8}
    found = neighbours(space, base)
    assert len(found) == sum(len(k.options) - 1 for k in space.knobs if k.name in base)
    one_warpgroup = next(c for c in found if c["consumer_warpgroups"] == 1)
    assert "consumer_split" not in one_warpgroup and "wg_schedule" not in one_warpgroup
    assert all(sum(c.get(k) != v for k, v in base.items()) >= 1 for c in found)
    assert {c["raster_swizzle"] for c in found} == {1, 2, 4, 8, 16}


@dataclass
class QuickReadsFast(PipelineExecutor):
    """Quick timing (``measure``) reads some schedules fast: the true best (a = b = 2,
    10.0) reads 10.9, its neighbours 5% under their true latency (11 -> 10.45); the final
    method (``retime_interleaved``) reads true latencies."""

    def _one(self, job: Any) -> FakeMeasurement:
        true = latency_of(job)
        quick = 10.9 if true == 10.0 else true * 0.95
        return FakeMeasurement(FakeStatus("ok"), quick, simulated=False)

    def retime_interleaved(self, jobs: Sequence[Any], rounds: int = 3) -> list[FakeMeasurement]:
        self.retimed.append(list(jobs))
        return [FakeMeasurement(FakeStatus("ok"), latency_of(job), simulated=False)
                for job in jobs]


@pytest.mark.parametrize("leaders", [0, 5])
def test_leaders_retimed_as_the_search_goes_keep_the_fastest_by_the_final_method(
        leaders: int) -> None:
    """The quick timing ranks the true best fifth, below its four neighbours, so the final
    re-timing of its top 2 alone misses it; re-timing each schedule that enters the top 5
    as the search goes finds it."""
    executor = QuickReadsFast(measure_s=0.0)
    config = SearchConfig(overlap=True, retime_top_k=2, retime_leaders=leaders, seed=3)
    result = _driver(executor, TinySpace(size=4), budget=Budget(trials=16),
                     config=config).run()
    best = result.best.schedule
    measured = {tuple(sorted(dict(p.choices).items())) for p in executor.measured}
    assert (("a", 2), ("b", 2)) in measured  # the search did measure the true best
    if leaders:
        assert (best["a"], best["b"]) == (2, 2) and result.best.latency_us == 10.0
        assert len(executor.retimed) > 1  # leaders during the search, finalists at the end
    else:
        assert (best["a"], best["b"]) != (2, 2)  # the defect the leaders' re-timing fixes
        assert len(executor.retimed) == 1


@pytest.mark.parametrize("leaders", [0, 5])
def test_progress_reports_the_best_so_far_by_the_final_method(leaders: int) -> None:
    """With leaders re-timed, the best so far a run shows is the one the winner will be
    chosen by: the true best at its true latency (the quick timing read 10.45 for a
    neighbour of true latency 11); without them, the quick timing's best."""
    executor = QuickReadsFast(measure_s=0.0)
    config = SearchConfig(overlap=True, retime_top_k=2, retime_leaders=leaders, seed=3)
    progress = []
    result = _driver(executor, TinySpace(size=4), budget=Budget(trials=16), config=config,
                     callbacks=SearchCallbacks(on_progress=progress.append)).run()
    searching = [p for p in progress if p.phase == "search" and p.best_latency_us is not None]
    last = searching[-1]
    if leaders:
        assert last.best_latency_us == 10.0 == result.best.latency_us
        assert last.best_schedule_hash == result.best.schedule_hash
        assert min(p.best_latency_us for p in searching) >= 10.0  # never a quick reading
    else:
        assert last.best_latency_us == pytest.approx(10.45)
    assert progress[-1].phase == "done"
    assert progress[-1].best_latency_us == result.best.latency_us
