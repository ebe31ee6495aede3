"""A size range cut into buckets: each bucket's schedule the best there, as few buckets as
keep the loss within the tolerance, every size of the range in exactly one bucket."""

from __future__ import annotations

import itertools
import math

import pytest

from scheduler_search.search.buckets import partition

SIZES = [1, 8, 64, 512, 4096, 16384]
#: A narrow tile (fast small), a wide one (fast large), one never best.
NARROW = [10.0, 10.0, 11.0, 30.0, 200.0, 800.0]
WIDE = [20.0, 20.0, 20.0, 25.0, 100.0, 400.0]
NEVER = [30.0, 30.0, 30.0, 40.0, 300.0, 900.0]


def test_each_bucket_gets_the_candidate_best_for_its_sizes() -> None:
    table = partition(SIZES, [NEVER, NARROW, WIDE], low=1, high=16384)
    assert [(b.low, b.high, b.choice) for b in table.buckets] == [(1, 181, 1), (182, 16384, 2)]
    assert table.buckets[0].loss == pytest.approx(1.0)
    assert table.bucket_of(181).choice == 1 and table.bucket_of(182).choice == 2
    assert table.bucket_of(1).choice == 1 and table.bucket_of(16384).choice == 2
    assert table.loss == pytest.approx(1.0)


def test_every_size_of_the_range_lies_in_one_bucket() -> None:
    table = partition(SIZES, [NARROW, WIDE, [15.0, 9.0, 30.0, 20.0, 120.0, 390.0]], low=1,
                      high=20000, max_buckets=6, tolerance=0.0)
    ends = [(b.low, b.high) for b in table.buckets]
    assert ends[0][0] == 1 and ends[-1][1] == 20000
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(ends))
    with pytest.raises(KeyError):
        table.bucket_of(20001)


def test_a_bucket_is_merged_away_when_it_buys_less_than_the_tolerance() -> None:
    # 0.3% behind NARROW at the three small sizes, the best at the large ones.
    close = [10.03, 10.03, 11.03, 25.0, 100.0, 400.0]
    loose = partition(SIZES, [NARROW, close], low=1, high=16384, tolerance=0.01)
    assert [b.choice for b in loose.buckets] == [1]
    assert loose.loss == pytest.approx(math.exp(3 * math.log(1.003) / 6), rel=1e-3)
    strict = partition(SIZES, [NARROW, close], low=1, high=16384, tolerance=0.0)
    assert [b.choice for b in strict.buckets] == [0, 1]


def test_a_candidate_that_could_not_run_is_never_chosen_there() -> None:
    broken = [5.0, 5.0, 5.0, None, 5.0, 5.0]
    table = partition(SIZES, [broken, WIDE], low=1, high=16384, tolerance=0.0)
    assert table.bucket_of(512).choice == 1
    with pytest.raises(ValueError, match="no candidate ran"):
        partition(SIZES, [[None] * 6], low=1, high=16384)


def test_a_first_candidate_that_failed_at_the_smallest_size_still_leaves_a_cut() -> None:
    """A failure of the pool's first candidate at the first size (an H200 bf16 run: its
    first kernel's first measurement timed out) is infinite over every segment holding
    that size and no other: the range is still cut, here into the two kernels' halves."""
    first = [None, 9.0, 9.0, 20.0, 200.0, 800.0]
    table = partition(SIZES, [first, NARROW, WIDE], low=1, high=16384, tolerance=0.0)
    assert table.bucket_of(1).choice == 1
    assert table.bucket_of(8).choice == 0 and table.bucket_of(16384).choice == 2
    assert len(table.buckets) == 3 and math.isfinite(table.loss)


def test_one_size_served_badly_keeps_its_own_bucket_under_a_size_tolerance() -> None:
    """A mean over many sizes hides one stretch served 8% slow (within 1% overall over
    sixty sizes): ``size_tolerance`` holds every size to 5% of its best."""
    sizes = list(range(1, 61))
    stepped = [10.0] * 60
    stepped[40:44] = [11.0] * 4  # four sizes where another kernel is 10% faster
    other = [12.0] * 60
    other[40:44] = [10.0] * 4
    merged = partition(sizes, [stepped, other], low=1, high=60, max_buckets=4,
                       tolerance=0.01)
    assert [b.choice for b in merged.buckets] == [0]
    held = partition(sizes, [stepped, other], low=1, high=60, max_buckets=4, tolerance=0.01,
                     size_tolerance=0.05)
    assert [b.choice for b in held.buckets] == [0, 1, 0]
    assert held.bucket_of(42).choice == 1 and held.bucket_of(45).choice == 0
    # Where the bucket cap leaves some size slow, the least-loss table's losses bound it.
    thirds = [[10.0 if i // 20 == c else 12.0 for i in range(60)] for c in range(3)]
    capped = partition(sizes, thirds, low=1, high=60, max_buckets=2, size_tolerance=0.05)
    assert len(capped.buckets) == 2
