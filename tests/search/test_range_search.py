"""A range search on the simulated device: a pool of run-time-m schedules measured at the
sampled sizes, cut into contiguous buckets; budget, resume, cancel and failed jobs."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest

from codegen import feasibility, unsupported
from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_range_spec
from scheduler_search.ops.ranges import SizeRange
from scheduler_search.search import Budget, SearchCallbacks, StopReason
from scheduler_search.search.range_cut import CONTENDER_SLACK, anchor_sizes, near_best
from scheduler_search.search.range_refine import PREDICTED_CONTENDERS
from scheduler_search.search.range_search import (
    RangeConfig,
    RangeSearch,
    plan_at,
    range_dim,
    range_dims,
    size_source,
    tied_sources,
)
from scheduler_search.space.designs import DESIGNS
from scheduler_search.sprogram import SProgram
from workers import Job
from workers.executors.simulated import SimulatedDevice

DEVICE = get_device("sim:h200")
PARAMS = {"m": {"min": 1, "max": 16384}, "n": 1024, "k": 1024, "dtype": "float16"}
#: Self-attention's prefill over a range: seq_q and seq_kv tied to one axis.
SEQ = {"min": 128, "max": 2048}
ATTENTION = {"batch": 1, "heads": 16, "kv_heads": 4, "seq_q": SEQ, "seq_kv": SEQ,
             "head_dim": 128, "causal": True, "dtype": "float16"}
#: Small enough for a second: few anchors' samples, six sizes, six candidates, no
#: refining rounds (their own tests below).
CONFIG = RangeConfig(sizes=6, pool=6, anchors=3, samples_per_anchor=24, climb_rounds=1,
                     refine_rounds=0)


class Recording(SimulatedDevice):
    """The simulated device, keeping what it was asked to measure and re-time."""

    def __init__(self, width: int = 8) -> None:
        super().__init__("sim:h200", capacity=width)
        self.batches: list[list[Job]] = []
        self.prepared: list[list[Job]] = []
        self.retimed: list[Job] = []
        self._retiming = False

    def measure(self, jobs: Sequence[Job]) -> list[Any]:
        if not self._retiming:
            self.batches.append(list(jobs))
        return super().measure(jobs)

    def prepare(self, jobs: Sequence[Job]) -> None:
        self.prepared.append(list(jobs))

    def retime_interleaved(self, jobs: Sequence[Job], rounds: int = 3) -> list[Any]:
        self.retimed.extend(jobs)
        self._retiming = True
        try:
            return super().retime_interleaved(jobs, rounds)
        finally:
            self._retiming = False


def _search(executor: Recording, *, trials: int | None = None, params: Mapping = PARAMS,
            config: RangeConfig = CONFIG, seconds: float | None = None, op: str = "gemm",
            **options: Any) -> RangeSearch:
    range_spec = parse_range_spec(op, dict(params))

    def make_jobs(sprogram: SProgram, sizes: Sequence[Mapping[str, int]],
                  final: bool) -> list[Job]:
        return [Job(workload={"op": op, "params": range_spec.exact(s).params()},
                    schedule=plan_at(range_spec, DEVICE, sprogram, s).to_dict(),
                    seed=1 if final else 0) for s in sizes]

    return RangeSearch(range_spec, DEVICE, executor, options.pop("make_jobs", make_jobs),
                       budget=Budget(trials=trials or config.default_trials, seconds=seconds),
                       config=config,
                       feasible=feasibility(op, DEVICE),
                       designs=list(DESIGNS[op].values()), **options)


def test_the_buckets_cover_the_range_each_with_a_run_time_m_kernel() -> None:
    executor = Recording()
    trials: list[Any] = []
    result = _search(executor, callbacks=SearchCallbacks(on_trials=trials.extend)).run()

    assert result.ok and result.dim == "m" and result.size_from == ("a", 0)
    ends = [(b.low, b.high) for b in result.buckets]
    assert ends[0][0] == 1 and ends[-1][1] == 16384
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(ends))
    assert result.loss is not None and result.loss >= 1.0
    for bucket in result.buckets:
        assert bucket.sprogram.runtime_dims == ("m",) and bucket.sprogram.persistent
        assert bucket.sprogram.params["m"] == 16384  # planned at the high end
        assert unsupported(bucket.sprogram, DEVICE) is None
        assert set(bucket.samples) <= set(bucket.latencies_us) == set(result.sizes)
        assert bucket.retimed_us is not None and set(bucket.retimed_us) == set(bucket.samples)
    # Every candidate at every size, once; the designs first.
    assert len(result.candidates) == CONFIG.pool
    assert result.candidates[0].source == "design"
    assert result.trials_done == len(trials) == len(result.measurements) == 6 * 6
    pairs = {(r.schedule_hash, r.choices["m"]) for r in trials}
    assert len(pairs) == 36 and {m for _, m in pairs} == set(result.sizes)
    assert all(r.ok and r.simulated and r.predicted_us for r in trials)
    # Batches as wide as the executor, each group of candidates size by size.
    assert all(len(batch) <= 8 for batch in executor.batches)
    first = executor.batches[0]
    assert len({j.workload["params"]["m"] for j in first}) <= 2
    # Re-timed: the final jobs of each bucket's winner at its sizes.
    assert executor.retimed and all(j.seed == 1 for j in executor.retimed)
    assert executor.prepared  # the next batch was handed to prepare


def test_each_bucket_gets_the_fastest_candidate_at_its_sizes() -> None:
    result = _search(Recording(), config=replace(CONFIG, estimated_sizes=0)).run()
    rows = {}
    for record in result.measurements:
        rows.setdefault(record.schedule_hash, {})[record.choices["m"]] = record.latency_us
    for bucket in result.buckets:
        for size in bucket.samples:
            best = min(row[size] for row in rows.values())
            assert rows[bucket.schedule_hash][size] <= best * (1 + CONFIG.tolerance) ** len(
                result.sizes)


def test_a_small_budget_measures_fewer_sizes_and_candidates() -> None:
    result = _search(Recording(), trials=10).run()
    assert result.trials_done <= 10
    assert len(result.sizes) == 2 and result.sizes == [1, 16384]
    assert len(result.candidates) == 5
    assert result.buckets[0].low == 1 and result.buckets[-1].high == 16384


def test_a_larger_budget_keeps_the_smaller_pool_as_its_start() -> None:
    small = _search(Recording(), trials=24).plan_pool(4)
    large = _search(Recording(), trials=48).plan_pool(8)
    assert [c.sprogram.hash for c in large[:4]] == [c.sprogram.hash for c in small]


def test_a_resumed_search_measures_nothing_twice() -> None:
    first = _search(Recording()).run()
    history = first.measurements[:20]
    executor = Recording()
    again = _search(executor, history=history).run()
    measured = [(j.schedule["params"]["m"], SProgram.from_dict(j.schedule).choices)
                for batch in executor.batches for j in batch]
    assert len(measured) == 36 - 20
    assert again.trials_done == 36
    assert [(b.low, b.high, b.schedule_hash) for b in again.buckets] == [
        (b.low, b.high, b.schedule_hash) for b in first.buckets]


def test_a_cancel_stops_between_batches_and_skips_the_retiming() -> None:
    executor = Recording(width=4)
    seen: list = []
    callbacks = SearchCallbacks(on_trials=seen.extend, should_stop=lambda: len(seen) >= 8)
    result = _search(executor, callbacks=callbacks).run()
    assert result.stop_reason is StopReason.CANCELLED and result.cancelled
    # Batches overlap: the third was planned and handed over while the second was
    # measured, before its records said to stop; it is finished, nothing after it.
    assert len(executor.batches) == 3 and not executor.retimed
    assert result.trials_done == len(seen) == 12
    # What was measured still makes a table over the sizes measured.
    assert result.ok and result.buckets[0].low == 1 and result.buckets[-1].high == 16384


def _failing_jobs(search: RangeSearch, error: Exception) -> tuple[str, object]:
    """make_jobs that raises ``error`` for the pool's first candidate, and its hash."""
    good = search.make_jobs
    broken = search.plan_pool(CONFIG.pool)[0].sprogram.hash

    def make_jobs(sprogram: SProgram, sizes: Sequence[Mapping[str, int]], final: bool):
        if sprogram.hash == broken:
            raise error
        return good(sprogram, sizes, final)

    return broken, make_jobs


def test_a_candidate_without_jobs_fails_its_measurements_and_never_wins() -> None:
    """Code generation refusing a candidate (a ValueError: ``Unsupported``, a schedule or
    spec error) fails its measurements, not the run."""
    executor = Recording()
    broken, make_jobs = _failing_jobs(_search(executor), ValueError("no kernel"))
    result = _search(executor, make_jobs=make_jobs).run()
    failed = [r for r in result.measurements if r.schedule_hash == broken]
    assert len(failed) == 6 and all(r.status == "render_error" for r in failed)
    assert "no kernel" in failed[0].error
    assert broken not in {b.schedule_hash for b in result.buckets}


def test_a_bug_in_making_jobs_stops_the_run_instead_of_failing_a_candidate() -> None:
    """Any other exception is a bug: it ends the search loudly rather than passing for a
    candidate that cannot run."""
    executor = Recording()
    _, make_jobs = _failing_jobs(_search(executor), KeyError("tile_m"))
    with pytest.raises(KeyError, match="tile_m"):
        _search(executor, make_jobs=make_jobs).run()


def test_listed_sizes_are_the_sizes_measured() -> None:
    params = {**PARAMS, "m": [1, 7, 64, 300]}
    result = _search(Recording(), params=params, trials=16).run()
    assert result.sizes == [1, 7, 64, 300]
    assert result.buckets[0].low == 1 and result.buckets[-1].high == 300


def test_helpers() -> None:
    assert anchor_sizes(SizeRange(1, 16384), 5) == [1, 11, 128, 1448, 16384]
    assert anchor_sizes(SizeRange(1, 300, (1, 7, 64, 300)), 3) == [1, 7, 300]
    assert anchor_sizes(SizeRange(64, 64), 5) == [64]
    gemm = parse_range_spec("gemm", PARAMS)
    assert size_source(gemm, "m") == ("a", 0)
    assert range_dim(gemm) == "m" and range_dims(gemm) == ("m",) and tied_sources(gemm) == ()
    tied = parse_range_spec("attention", {**ATTENTION, "layout": "bhsd"})
    assert range_dim(tied) == "seq_q" and range_dims(tied) == ("seq_q", "seq_kv")
    assert size_source(tied, "seq_q") == ("q", 2)
    assert tied_sources(tied) == (("seq_kv", "k", 2),)
    only_kv = parse_range_spec("attention", {**ATTENTION, "seq_q": 1})
    assert range_dims(only_kv) == ("seq_kv",) and size_source(only_kv, "seq_kv") == ("k", 1)


def test_an_extended_search_measures_only_what_the_larger_plan_adds() -> None:
    config = replace(CONFIG, sizes=10)  # the budget, not the knob, bounds the sizes
    first = _search(Recording(), trials=24, config=config).run()
    executor = Recording()
    extended = _search(executor, trials=36, config=config, history=first.measurements).run()
    assert set(first.sizes) < set(extended.sizes)  # the sizes of a larger plan include them
    assert [c.sprogram.hash for c in first.candidates] == [
        c.sprogram.hash for c in extended.candidates[: len(first.candidates)]]
    assert sum(len(batch) for batch in executor.batches) == 36 - 24
    assert extended.trials_done == 36


def test_a_time_budget_waits_for_one_kernel_at_every_size() -> None:
    """Seconds spent before the first group has covered the range: the search goes on
    until some candidate ran at every size, so no part of the range is served blind."""
    range_spec = parse_range_spec("gemm", dict(PARAMS))
    result = _search(Recording(width=2), seconds=1e-9).run()
    assert result.stop_reason is StopReason.SECONDS
    measured = {r.choices["m"] for r in result.measurements if r.ok}
    assert measured == set(result.sizes) and len(result.sizes) == CONFIG.sizes
    assert result.trials_done < CONFIG.default_trials  # it stopped once they were covered
    assert result.buckets[0].low == range_spec.ranges["m"].low


def test_a_self_attention_range_ties_seq_kv_to_seq_q() -> None:
    """seq_q = seq_kv over 128..2048: each candidate takes both at run time, each job is
    planned at both set to the size, each record is named by seq_q; the buckets cover
    the axis and the result says where a call reads each length."""
    executor = Recording()
    config = replace(CONFIG, sizes=5, pool=4, anchors=2, samples_per_anchor=16)
    result = _search(executor, params=ATTENTION, trials=20, config=config,
                     op="attention").run()
    assert result.ok and result.dim == "seq_q" and result.dims == ("seq_q", "seq_kv")
    assert result.size_from == ("q", 1) and result.tied == (("seq_kv", "k", 1),)
    assert result.sizes[0] == 128 and result.sizes[-1] == 2048
    assert all(c.sprogram.runtime_dims == ("seq_q", "seq_kv") for c in result.candidates)
    assert all(c.sprogram.params["seq_q"] == c.sprogram.params["seq_kv"] == 2048
               for c in result.candidates)
    jobs = [job for batch in executor.batches for job in batch]
    assert len(jobs) == result.trials_done == 20
    for job in jobs:
        params = job.workload["params"]
        assert params["seq_q"] == params["seq_kv"] == job.schedule["params"]["seq_q"]
        assert job.schedule["params"]["seq_kv"] == params["seq_kv"]
    assert {r.choices["seq_q"] for r in result.measurements} == set(result.sizes)
    assert all("seq_kv" not in r.choices for r in result.measurements)
    assert result.buckets[0].low == 128 and result.buckets[-1].high == 2048
    # Every bucket re-timed at each sampled size it holds (one the cut drew between two
    # samples holds none).
    assert all(set(b.retimed_us or {}) == set(b.samples) for b in result.buckets)
    assert any(b.samples for b in result.buckets)


def _served_loss(result: Any, sizes: list[int]) -> tuple[float, float]:
    """Geometric mean and worst of served / best latency at ``sizes`` (the cost model's
    latency, the simulated device's truth), over the run's candidates."""
    from scheduler_search.cost_model import estimate

    range_spec = parse_range_spec("gemm", PARAMS)

    def latency(sprogram: SProgram, m: int) -> float:
        planned = plan_at(range_spec, DEVICE, sprogram, {"m": m})
        return estimate(planned, range_spec.exact({"m": m}), DEVICE).latency_us

    logs = []
    for m in sizes:
        best = min(latency(c.sprogram, m) for c in result.candidates)
        served = next(b for b in result.buckets if b.low <= m <= b.high).sprogram
        logs.append(math.log(latency(served, m) / best))
    return math.exp(sum(logs) / len(logs)), math.exp(max(logs))


def test_estimates_between_samples_cut_the_range_where_waves_change() -> None:
    """Cut with each candidate's time estimated between the samples (its measurement
    scaled by the cost model), the table serves sizes it never sampled closer to the
    best candidate, on average and at the worst size, than one cut at the samples."""
    unseen = [round(math.exp(math.log(16384) * (i + 0.5) / 40)) for i in range(40)]
    losses = {}
    for estimated in (0, 48):
        config = replace(CONFIG, sizes=8, pool=10, estimated_sizes=estimated)
        losses[estimated] = _served_loss(_search(Recording(), config=config).run(), unseen)
    assert losses[48][0] < losses[0][0] and losses[48][1] < losses[0][1]


class Jumping(Recording):
    """The simulated device, except that the kernel of ``slow`` (an sProgram's choices)
    runs ``factor`` times slower for m in ``jump`` (its tiles in another wave)."""

    def __init__(self, slow: Mapping[str, Any], jump: range, factor: float = 3.0) -> None:
        super().__init__()
        self.slow, self.jump, self.factor = dict(slow), jump, factor

    def measure(self, jobs: Sequence[Job]) -> list[Any]:
        results = super().measure(jobs)
        return [replace(result, latency_us=result.latency_us * self.factor)
                if (job.workload["params"]["m"] in self.jump
                    and SProgram.from_dict(job.schedule).choices == self.slow) else result
                for job, result in zip(jobs, results, strict=True)]


REFINING = replace(CONFIG, sizes=8, pool=10, estimated_sizes=0, refine_rounds=2,
                   refine_sizes=4)
#: Pool trials (three quarters) give 10 candidates at 8 sizes.
REFINING_TRIALS = 108


def test_refining_measures_the_contenders_between_samples_where_things_change() -> None:
    search = _search(Recording(), trials=REFINING_TRIALS, config=REFINING)
    planned = search.plan_sizes()
    result = search.run()
    added = sorted(set(result.sizes) - set(planned))
    assert set(planned) < set(result.sizes) and len(added) <= 2 * REFINING.refine_sizes
    assert len(result.candidates) == 10 and result.trials_done <= REFINING_TRIALS
    by_size: dict[int, dict[str, float]] = {}
    for record in result.measurements:
        by_size.setdefault(record.choices["m"], {})[record.schedule_hash] = record.latency_us
    assert all(len(by_size[m]) == 10 for m in planned)
    # The first round's sizes are geometric middles of gaps between the planned sizes.
    gaps = [(a, b) for a, b in itertools.pairwise(planned)
            if round(math.sqrt(a * b)) in added]
    assert gaps and all(a < m < b for a, b in gaps for m in [round(math.sqrt(a * b))])
    def near(size: int) -> set[str]:
        return {h for h, us in by_size[size].items()
                if us <= CONTENDER_SLACK * min(by_size[size].values())}

    for m in added:
        # Only the contenders: those within the slack of the best at either end of the
        # gap it splits (two disjoint sets of near-best may make them all), and at most
        # PREDICTED_CONTENDERS the cost model expects to be near the best in the middle.
        ends = [(a, b) for a, b in itertools.combinations(sorted(set(by_size) - {m}), 2)
                if round(math.sqrt(a * b)) == m]
        assert by_size[m] and any(len(set(by_size[m]) - near(a) - near(b))
                                  <= PREDICTED_CONTENDERS for a, b in ends)
    assert any(len(by_size[m]) < 10 for m in added)
    for a, b in gaps:  # the winners at both ends were measured in the middle
        winners = {min(by_size[s], key=by_size[s].get) for s in (a, b)}
        assert winners <= set(by_size[round(math.sqrt(a * b))])


def test_refining_finds_a_kernel_that_jumps_between_samples() -> None:
    """The winner at every sample runs 3x slower between two samples: the estimates
    cannot know, the refining round measures there, and another kernel serves it."""
    # Room to refine every gap whose ends change (the small sizes' winners change too).
    refining = replace(REFINING, refine_sizes=8)
    probe = _search(Recording(), trials=REFINING_TRIALS, config=refining)
    planned = probe.plan_sizes()
    plain = _search(Recording(), trials=REFINING_TRIALS,
                    config=replace(refining, refine_rounds=0)).run()
    top = plain.buckets[-1]
    low, high = planned[-2], planned[-1]
    middle = round(math.sqrt(low * high))
    jump = range(low + 1, high)
    served_plain = next(b for b in plain.buckets if b.low <= middle <= b.high)
    assert served_plain.schedule_hash == top.schedule_hash  # blind to the jump
    result = _search(Jumping(top.sprogram.choices, jump), trials=REFINING_TRIALS,
                     config=refining).run()
    assert middle in result.sizes
    served = next(b for b in result.buckets if b.low <= middle <= b.high)
    assert served.schedule_hash != top.schedule_hash


def test_the_cut_follows_a_kernels_steps_into_another_wave(monkeypatch) -> None:
    """Where the cost model has a bucket's kernel step into another wave (one more tile
    along m) the cut adds the sizes either side of the step: served just past the steps
    of the pool's kernels, the table is closer to the best than one cut over a coarse
    log-spaced grid of estimates alone."""
    from scheduler_search.search import range_cut

    config = replace(CONFIG, sizes=8, pool=10, estimated_sizes=8)
    tables = {}
    for rounds in (0, range_cut.JUMP_ROUNDS):
        monkeypatch.setattr(range_cut, "JUMP_ROUNDS", rounds)
        tables[rounds] = _search(Recording(), config=config).run()
    steps = sorted({s + 1 for c in tables[0].candidates for t in [c.sprogram.tile["m"]]
                    for s in range(t, 16384, t)} - set(tables[0].sizes))[::7]  # 37 sizes
    plain = _served_loss(tables[0], steps)
    stepped = _served_loss(tables[range_cut.JUMP_ROUNDS], steps)
    assert stepped[0] < plain[0] and stepped[1] <= plain[1]


def test_the_returned_cut_was_asked_for_steps_until_none_were_new(monkeypatch) -> None:
    """Each new cut can grow a bucket over a step of its kernel that the last one did not
    span: the cut is redone until its buckets hold no step it has not seen, so the table
    that comes back was checked (three rounds of new steps: the fourth cut returns)."""
    from scheduler_search.search import range_cut

    search = _search(Recording(), config=replace(CONFIG, sizes=8, pool=10, estimated_sizes=8))
    cuts: list[Any] = []
    checked: list[Any] = []
    real_partition = range_cut.partition

    def counting_partition(*args: Any, **kwargs: Any) -> Any:
        cuts.append(real_partition(*args, **kwargs))
        return cuts[-1]

    def new_steps(table: Any, candidates: Any) -> set[int]:
        checked.append(table)
        return {100 + 10 * len(checked)} if len(checked) <= 3 else set()

    monkeypatch.setattr(range_cut, "partition", counting_partition)
    monkeypatch.setattr(search.cut, "jumps", new_steps)
    result = search.run()
    assert len(cuts) == 4 and checked == cuts
    assert cuts[-1] is not None and result.buckets


def test_near_best_names_the_candidates_within_the_slack_at_each_size() -> None:
    """The contenders of a size: every candidate within ``CONTENDER_SLACK`` (1.25) of the
    fastest there; a size nobody ran at has none."""
    rows = [[10.0, None, 30.0], [12.4, 5.0, None], [12.6, None, None]]
    assert near_best(rows) == [{0, 1}, {1}, {0}]
    assert near_best([[None, 1.0]]) == [set(), {0}]


def test_no_bucket_is_served_on_an_estimate_at_a_size_it_sampled() -> None:
    """After the cut each bucket's kernel is measured at the bucket's sampled sizes it
    won on an estimate alone, and the range is cut again: every bucket's kernel has a
    measurement at each of its samples (on the simulated device, 240 trials, three of
    ten buckets were served on estimates there before the confirmations)."""
    config = replace(CONFIG, sizes=8, pool=10, estimated_sizes=8, refine_rounds=2,
                     refine_sizes=4)
    search = _search(Recording(), trials=240, config=config)
    result = search.run()
    assert len(result.buckets) > 3 and result.trials_done <= 240
    for bucket in result.buckets:
        assert set(bucket.samples) <= set(bucket.latencies_us), (bucket.low, bucket.high)
    assert search.confirm_trials() == min(config.max_buckets, (240 - 180) // 4)
