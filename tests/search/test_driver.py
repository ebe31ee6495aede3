"""The search driver: batches, no invalid or repeated measurement, budgets, warm start,
re-timing, seeding, the persistent study and resuming."""

from __future__ import annotations

import optuna
import pytest
from search_fakes import FakeProgram, RecordingExecutor, TinySpace, latency_of

from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_spec
from scheduler_search.search import (
    INVALID,
    SOURCE_WARM_START,
    Budget,
    SearchCallbacks,
    SearchConfig,
    SearchDriver,
    StopReason,
)
from scheduler_search.space import ScheduleSpace
from scheduler_search.sprogram import check_valid

optuna.logging.set_verbosity(optuna.logging.WARNING)

GEMM = {"m": 1024, "n": 1024, "k": 1024, "dtype": "float16"}


def _gemm_space() -> ScheduleSpace:
    return ScheduleSpace(parse_spec("gemm", GEMM), get_device("sim:h200"))


def _by_tile(sprogram) -> float:
    """A cheap, deterministic stand-in latency for real sPrograms."""
    c = sprogram.choices
    return 100.0 + abs(c["tile_m"] - 128) + abs(c["tile_n"] - 128) / 2 + c.get("stages_ab", 1)


def _driver(space, executor, **kwargs):
    kwargs.setdefault("estimator", latency_of if isinstance(space, TinySpace) else _by_tile)
    return SearchDriver(space, executor, lambda program: program, **kwargs)


def test_real_space_never_measures_invalid_or_repeated_points() -> None:
    space = _gemm_space()
    executor = RecordingExecutor(width=4, latency=_by_tile)
    seen: list = []
    result = _driver(space, executor, budget=Budget(trials=24),
                     callbacks=SearchCallbacks(on_trials=seen.extend)).run()
    assert result.stop_reason is StopReason.TRIALS and result.trials_done == 24
    measured = executor.measured
    assert len(measured) == 24
    assert all(len(batch) <= 4 for batch in executor.batches)
    assert len({p.hash for p in measured}) == 24  # never the same schedule twice
    for program in measured:  # nothing invalid ever reached the executor
        assert check_valid(program, space.spec, space.device).ok
    # Invalid points are counted, never trials: every record is a measured schedule.
    assert result.invalid > 0
    assert all(r.status != INVALID and r.schedule_hash is not None for r in seen)
    ok = [r for r in seen if r.status == "ok"]
    assert len(ok) == 24 and all(r.predicted_us is not None for r in ok)
    assert result.best is not None and result.best.latency_us == min(r.latency_us for r in ok)


def test_pool_is_ranked_by_the_cost_model() -> None:
    space = _gemm_space()
    executor = RecordingExecutor(width=2, latency=_by_tile)
    predicted = []

    def estimator(program) -> float:
        value = _by_tile(program)
        predicted.append(value)
        return value

    _driver(
        space, executor, budget=Budget(trials=2), estimator=estimator,
        config=SearchConfig(pool_factor=4, retime_top_k=1),
    ).run()
    first_pool = sorted(predicted[:8])
    assert sorted(_by_tile(p) for p in executor.batches[0]) == first_pool[:2]


def test_same_seed_same_trials_other_seed_other_trials() -> None:
    def hashes(seed: int) -> list[str]:
        executor = RecordingExecutor(width=3, latency=_by_tile)
        _driver(_gemm_space(), executor, budget=Budget(trials=12),
                config=SearchConfig(seed=seed)).run()
        return [p.hash for p in executor.measured]

    assert hashes(7) == hashes(7)
    assert hashes(7) != hashes(8)


def test_exhausted_when_the_space_runs_out() -> None:
    executor = RecordingExecutor(width=2)
    result = _driver(TinySpace(size=3, limit=4), executor, budget=Budget(trials=100)).run()
    # 9 points, of which a + b <= 4 are valid: 6.
    assert result.stop_reason is StopReason.EXHAUSTED
    assert result.trials_done == len(executor.measured) == 6
    assert result.best is not None and result.best.choices == {"a": 2, "b": 2}


def test_patience_seconds_and_cancel() -> None:
    executor = RecordingExecutor(width=1, latency=lambda program: 5.0)  # nothing improves
    result = _driver(TinySpace(size=6), executor, budget=Budget(trials=30, patience=3)).run()
    assert result.stop_reason is StopReason.NO_IMPROVEMENT and result.trials_done == 4

    result = _driver(
        TinySpace(size=6), RecordingExecutor(), budget=Budget(trials=30, seconds=1e-9)
    ).run()
    assert result.stop_reason is StopReason.SECONDS and result.trials_done == 0

    calls = []
    result = _driver(
        TinySpace(size=6), RecordingExecutor(width=2), budget=Budget(trials=30),
        callbacks=SearchCallbacks(should_stop=lambda: len(calls) >= 2,
                                  on_progress=calls.append)).run()
    assert result.stop_reason is StopReason.CANCELLED and result.trials_done == 4


def test_failed_measurements_are_kept_but_never_win() -> None:
    executor = RecordingExecutor(width=3, fail=lambda p: dict(p.choices)["a"] == 2)
    records = []
    result = _driver(TinySpace(size=3), executor, budget=Budget(trials=9),
                     callbacks=SearchCallbacks(on_trials=records.extend)).run()
    failed = [r for r in records if r.status == "launch_error"]
    assert failed and all(r.latency_us is None and r.error == "boom" for r in failed)
    assert result.best is not None and result.best.choices["a"] != 2


def test_warm_start_is_measured_first_and_finalists_are_retimed() -> None:
    executor = RecordingExecutor(width=2)
    result = _driver(
        TinySpace(size=5), executor, budget=Budget(trials=6),
        warm_start=[{"a": 2, "b": 2}, {"a": 9, "b": 1}],  # a=9 is not an option: a is sampled
        config=SearchConfig(retime_top_k=3),
    ).run()
    first = executor.batches[0]
    assert dict(first[0].choices) == {"a": 2, "b": 2}
    assert dict(first[1].choices)["b"] == 1
    assert len(executor.retimed) == 1 and len(executor.retimed[0]) == 3
    assert result.best is not None and result.best.source == SOURCE_WARM_START
    latencies = [f.latency_us for f in result.finalists]
    assert latencies == sorted(latencies)


def test_persistent_study_and_resume(tmp_path) -> None:
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    first_executor = RecordingExecutor(width=2)
    records = []
    _driver(TinySpace(size=5), first_executor, budget=Budget(trials=6), storage=storage,
            study_name="run-1", callbacks=SearchCallbacks(on_trials=records.extend)).run()
    study = optuna.load_study(study_name="run-1", storage=storage)
    complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(complete) == 6  # the measured trials, mirrored

    # Resume with a larger budget: the first six count and are never measured again.
    second_executor = RecordingExecutor(width=2)
    measured = [r for r in records if r.status != INVALID]
    for record in measured:
        record.schedule = None  # as the service has them: rebuilt on demand
    result = _driver(TinySpace(size=5), second_executor, budget=Budget(trials=10),
                     storage=storage, study_name="run-1", history=records).run()
    assert result.trials_done == 10 and len(second_executor.measured) == 4
    before = {FakeProgram(tuple(sorted(r.choices.items()))).hash for r in measured}
    assert not before & {p.hash for p in second_executor.measured}


@pytest.mark.parametrize("device", ["sim:h200", "sim:h100"])
def test_with_the_cost_model_and_the_simulated_device(device: str) -> None:
    from workers import Job, SimulatedDevice

    spec = parse_spec("gemm", GEMM)
    space = ScheduleSpace(spec, get_device(device))
    executor = SimulatedDevice(device, capacity=4)
    workload = {"op": "gemm", "params": spec.params()}
    result = SearchDriver(
        space, executor, lambda sp: Job(workload, schedule=sp.to_dict()),
        budget=Budget(trials=12),
    ).run()
    assert result.stop_reason is StopReason.TRIALS and result.best is not None
    assert result.best.simulated and result.best.latency_us > 0
    assert result.best.schedule is not None


def test_ties_stop_the_search_and_the_first_measured_wins() -> None:
    """A device that cannot tell schedules apart (latency from tile_m alone): once two
    rounds in a row measure only known latencies the search stops, and of the tied best
    the first measured wins, the same on every run of a seed."""

    def tile_only(program) -> float:
        return 100.0 + program.choices["tile_m"]

    def run() -> tuple:
        executor = RecordingExecutor(width=4, latency=tile_only)
        records: list = []
        result = _driver(_gemm_space(), executor, budget=Budget(trials=200),
                         config=SearchConfig(seed=3, stop_when_tied=2),
                         callbacks=SearchCallbacks(on_trials=records.extend)).run()
        return result, records

    result, records = run()
    assert result.stop_reason is StopReason.INDISTINGUISHABLE
    assert result.trials_done < 200
    best_latency = min(r.latency_us for r in records)
    first_best = next(r for r in records if r.latency_us == best_latency)
    assert result.best is not None and result.best.schedule_hash == first_best.schedule_hash
    again, _ = run()
    assert again.best is not None and again.best.schedule_hash == result.best.schedule_hash


def test_the_simulated_preset_measures_only_valid_points_and_finds_the_models_best() -> None:
    """On the simulated device the cost model's picks find the space's best simulated
    schedule within a few percent; every trial is a measured, valid schedule. The slice
    without split-K, stream-K and clusters (1/63 of the whole: a walk of 4 s, not 50)."""
    from scheduler_search.cost_model import shipped_calibration
    from scheduler_search.search import SIMULATED
    from workers import Job, SimulatedDevice

    spec = parse_spec("gemm", {"m": 64, "n": 64, "k": 64, "dtype": "float16"})
    space = ScheduleSpace(spec, get_device("sim:h200"),
                          fixed={"split_k": 1, "stream_k": 0, "cluster_size": 1})
    candidates, count = space.enumerate()
    assert count.valid < count.total // 50  # under 2% of this space is valid
    records: list = []
    result = SearchDriver(
        space, SimulatedDevice("sim:h200", capacity=4),
        lambda sp: Job({"op": "gemm", "params": spec.params()}, schedule=sp.to_dict()),
        budget=Budget(trials=64), config=SIMULATED.config(seed=0),
        callbacks=SearchCallbacks(on_trials=records.extend)).run()
    assert records and all(r.status == "ok" for r in records)
    assert result.invalid > 0  # the sampler's rejected asks, counted, never trials
    calibration = shipped_calibration(space.device.name, "gemm")  # what the device measures
    assert calibration is not None
    floor = min(calibration.predict_us(c.sprogram, spec, space.device) for c in candidates)
    assert result.best is not None and result.best.latency_us <= floor * 1.03


def test_a_cancel_drops_the_batch_it_interrupts_and_skips_the_retiming() -> None:
    """A cancel that comes while a batch is being proposed: that batch is never measured,
    nothing is re-timed, and the best measured so far comes back with its schedule."""
    executor = RecordingExecutor(width=2)
    asked = {"rounds": 0}

    def cancelled() -> bool:  # polled before and after each round's proposals
        asked["rounds"] += 1
        return asked["rounds"] > 4  # two rounds measured, the third dropped

    result = _driver(TinySpace(size=6), executor, budget=Budget(trials=30),
                     callbacks=SearchCallbacks(should_stop=cancelled)).run()
    assert result.stop_reason is StopReason.CANCELLED
    assert len(executor.batches) == 2 and result.trials_done == 4
    assert executor.retimed == []
    assert result.best is not None and result.best.schedule is not None
    assert result.best.latency_us == min(latency_of(p) for p in executor.measured)
