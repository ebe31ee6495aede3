"""A size range cut into buckets, each with the schedule that serves it best.

A range run measures its candidates at sizes sampled over the range
(:meth:`scheduler_search.ops.RangeSpec.sample`). No one schedule is best everywhere: a
GEMM with m = 1 wants narrow tiles and split reductions, one with m = 16384 the widest
tiles. :func:`partition` cuts the sampled sizes into contiguous buckets and gives each the
candidate whose latencies there are closest to the best measured at each size (the
geometric mean of the ratios, so every size counts alike whatever its time), with as few
buckets as keep the loss within ``tolerance`` of the least any number of buckets reaches,
and no size served more than ``size_tolerance`` slower than the best candidate there
(or than the least-loss table serves it, where that is worse): each
bucket is one more kernel to compile and keep, but a geometric mean over a hundred sizes
hides one stretch served badly (an H200 fp16 table kept a stream-K kernel over m =
1857..2588 at 1.083 of the best, within 1% overall, and it ran m = 2484 at 0.79 of
cuBLAS where a 208-wide tile held three waves).

Between two sampled sizes the bucket boundary is their geometric middle: a size is
served by the bucket of the sampled size it is nearest to in log space.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

#: Latencies of one candidate at each sampled size (None: it could not run there).
Row = Sequence[float | None]


@dataclass(frozen=True)
class Bucket:
    """Sizes ``low``..``high`` served by candidate ``choice``, which runs at ``loss``
    times the best measured kernel there (geometric mean over the bucket's ``samples``
    sampled sizes)."""

    low: int
    high: int
    choice: int
    loss: float
    samples: int


@dataclass(frozen=True)
class BucketTable:
    """Contiguous buckets covering a range, in order."""

    buckets: tuple[Bucket, ...]

    def bucket_of(self, size: int) -> Bucket:
        """The bucket that serves ``size``.

        Raises:
            KeyError: ``size`` is outside the table's range.
        """
        highs = [b.high for b in self.buckets]
        index = bisect.bisect_left(highs, size)
        if size < self.buckets[0].low or index == len(self.buckets):
            raise KeyError(f"size {size} is outside {self.buckets[0].low}..{highs[-1]}")
        return self.buckets[index]

    @property
    def loss(self) -> float:
        """The geometric mean over all sampled sizes of the served-to-best ratio."""
        total = sum(b.samples for b in self.buckets)
        return math.exp(sum(b.samples * math.log(b.loss) for b in self.buckets) / total)


def partition(
    sizes: Sequence[int],
    latencies: Sequence[Row],
    *,
    low: int,
    high: int,
    max_buckets: int = 8,
    tolerance: float = 0.01,
    size_tolerance: float | None = None,
) -> BucketTable:
    """Cut ``low..high`` into buckets over the sampled ``sizes`` (sorted, distinct) given
    each candidate's ``latencies`` at them (``latencies[c][i]`` at ``sizes[i]``).

    Raises:
        ValueError: no sizes, rows of another length, or a size no candidate ran at.
    """
    if not sizes or any(len(row) != len(sizes) for row in latencies):
        raise ValueError("latencies need one value per sampled size for every candidate")
    best = [min((row[i] for row in latencies if row[i] is not None), default=None)
            for i in range(len(sizes))]
    missing = [s for s, b in zip(sizes, best, strict=True) if b is None]
    if missing:
        raise ValueError(f"no candidate ran at size(s) {missing}")
    logs = [[math.log(row[i] / best[i]) if row[i] is not None else math.inf
             for i in range(len(sizes))] for row in latencies]
    plans = _plans(logs, min(max_buckets, len(sizes)))
    least_count = min(plans, key=lambda c: (plans[c][0], -c))
    least = _per_size(logs, plans[least_count][1])
    slack = len(sizes) * math.log1p(tolerance)
    worst = math.inf if size_tolerance is None else math.log1p(size_tolerance)
    count = min(c for c, (total, segments) in plans.items()
                if total <= plans[least_count][0] + slack
                and all(here <= max(there, worst) for here, there
                        in zip(_per_size(logs, segments), least, strict=True)))
    return _table(sizes, logs, plans[count][1], low, high)


def _per_size(logs: list[list[float]], segments: list) -> list[float]:
    """Each sampled size's log-loss under ``segments``."""
    return [logs[choice][i] for start, end, choice in segments for i in range(start, end)]


def _plans(logs: list[list[float]], max_buckets: int) -> dict[int, tuple[float, list]]:
    """For each bucket count, the least total log-loss and its segments (start, end,
    candidate), by dynamic programming over the samples' prefixes."""
    n = len(logs[0])
    # Sums of the finite losses and counts of the infinite ones (a size a candidate failed
    # at), kept apart: a prefix sum through an infinity makes every later segment's
    # difference inf - inf = NaN, and a NaN compares false with everything.
    prefix = [[0.0] * (n + 1) for _ in logs]
    failed = [[0] * (n + 1) for _ in logs]
    for c, row in enumerate(logs):
        for i, value in enumerate(row):
            finite = math.isfinite(value)
            prefix[c][i + 1] = prefix[c][i] + (value if finite else 0.0)
            failed[c][i + 1] = failed[c][i] + (not finite)

    best: dict[tuple[int, int], tuple[float, int]] = {}

    def segment(i: int, j: int) -> tuple[float, int]:
        """The candidate with the least loss over samples i..j-1 (each segment once: a
        table over estimated sizes has dozens)."""
        if (i, j) not in best:
            best[i, j] = min((math.inf if failed[c][j] > failed[c][i]
                              else prefix[c][j] - prefix[c][i], c) for c in range(len(logs)))
        return best[i, j]

    # cost[b][j]: the best total over the first j samples in b buckets.
    cost = [[math.inf] * (n + 1) for _ in range(max_buckets + 1)]
    back: list[list[tuple[int, int]]] = [[(0, 0)] * (n + 1) for _ in range(max_buckets + 1)]
    cost[0][0] = 0.0
    for b in range(1, max_buckets + 1):
        for j in range(1, n + 1):
            for i in range(b - 1, j):
                loss, choice = segment(i, j)
                total = cost[b - 1][i] + loss
                if total < cost[b][j]:
                    cost[b][j], back[b][j] = total, (i, choice)
    plans = {}
    for b in range(1, max_buckets + 1):
        if math.isinf(cost[b][n]):
            continue
        segments, j = [], n
        for level in range(b, 0, -1):
            i, choice = back[level][j]
            segments.append((i, j, choice))
            j = i
        plans[b] = (cost[b][n], segments[::-1])
    return plans


def _table(sizes: Sequence[int], logs: list[list[float]], segments: list, low: int,
           high: int) -> BucketTable:
    buckets = []
    for index, (i, j, choice) in enumerate(segments):
        start = low if index == 0 else _boundary(sizes[i - 1], sizes[i]) + 1
        end = high if index == len(segments) - 1 else _boundary(sizes[j - 1], sizes[j])
        loss = math.exp(sum(logs[choice][i:j]) / (j - i))
        buckets.append(Bucket(start, end, choice, loss, j - i))
    return BucketTable(tuple(buckets))


def _boundary(below: int, above: int) -> int:
    """The last size served with ``below``'s bucket: their geometric middle."""
    return max(below, min(above - 1, math.floor(math.sqrt(below * above))))


__all__ = ["Bucket", "BucketTable", "partition"]
