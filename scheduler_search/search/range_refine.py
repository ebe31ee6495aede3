"""Where a range run looks closer after its first pass: the middles of the gaps between
measured sizes where the winner or the best time changes, and the candidates worth
measuring there (see :mod:`scheduler_search.search.range_search`, step 4)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

from scheduler_search.search.range_cut import CONTENDER_SLACK, near_best, scaled_estimate
from scheduler_search.search.range_pool import RangeCandidate

#: A gap between measured sizes whose best times differ by more than this factor is
#: refined (so is one whose ends have different winners): the kernels' tiles may spill
#: into another wave in it. Where time hardly moves with the size (a GEMM's first few
#: hundred m, bound by reading B) nothing is gained by looking closer.
REFINE_STEP = 1.15

#: Candidates a refining round also measures at a gap's middle because the cost model,
#: scaled from their nearest measurement, has them near the best there
#: (:meth:`RefinePlanner.predicted_contenders`).
PREDICTED_CONTENDERS = 3


@dataclass(frozen=True)
class RefinePlanner:
    """Plans a refining round from what the search knows.

    Args:
        latency: a candidate's measured latency at a size (None: not measured, or failed).
        measured: a candidate's measured latency at every size it ran at.
        predict: the cost model's latency of a candidate at a size (None: none).
        refine_sizes: the most gaps a round looks into.
    """

    latency: Callable[[RangeCandidate, int], float | None]
    measured: Callable[[RangeCandidate], dict[int, float]]
    predict: Callable[[RangeCandidate, int], float | None]
    refine_sizes: int

    def gaps(self, candidates: list[RangeCandidate], sizes: list[int]
             ) -> list[tuple[int, list[RangeCandidate]]]:
        """Up to ``refine_sizes`` (middle, contenders) of the widest gaps (in log) between
        measured sizes whose ends have different winners or best times more than
        :data:`REFINE_STEP` apart; the contenders are the candidates within
        ``CONTENDER_SLACK`` of the best at either end, and those predicted to be at the
        middle (:meth:`predicted_contenders`)."""
        ordered = sorted(sizes)
        rows = [[self.latency(c, size) for size in ordered] for c in candidates]
        ends: list[tuple[int, float, list[RangeCandidate]]] = []
        for column, (size, near) in enumerate(zip(ordered, near_best(rows), strict=True)):
            if near:
                top = sorted(near, key=lambda i: (rows[i][column], i))
                ends.append((size, rows[top[0]][column], [candidates[i] for i in top]))
        found = []
        for (low, low_us, low_top), (high, high_us, high_top) in itertools.pairwise(ends):
            changes = (low_top[0] is not high_top[0]
                       or max(low_us, high_us) > REFINE_STEP * min(low_us, high_us))
            if changes and high - low >= 2:
                middle = round(math.sqrt(low * high))
                contenders = list({c.index: c for c in low_top + high_top
                                   + self.predicted_contenders(candidates, middle)}.values())
                found.append((math.log(high / low), middle, contenders))
        found.sort(key=lambda gap: -gap[0])
        return [(middle, contenders) for _, middle, contenders
                in found[: self.refine_sizes] if middle not in sizes]

    def predicted_contenders(self, candidates: list[RangeCandidate], size: int
                             ) -> list[RangeCandidate]:
        """Up to :data:`PREDICTED_CONTENDERS` candidates whose nearest measurement,
        scaled by the cost model's ratio, is within ``CONTENDER_SLACK`` of the least such
        estimate at ``size``: a tile whose count fills a wave only between two sampled
        sizes loses at both and would never be measured where it wins (on an H200,
        2026-12-04, a 104-token swapped tile over 128 weight rows of a 3200 x 4608
        weight fills one wave at m = 441..520, where the table served a 128 x 192 tile
        at 0.70 of cuBLAS's speed; a 96-token one ran m = 478 at 1.08). They are only
        measured: a bucket is still served on measurements and on the estimates of
        candidates in the running."""
        estimates = []
        for candidate in candidates:
            measured = self.measured(candidate)
            if not measured or size in measured:
                continue
            us = scaled_estimate(size, measured, lambda s, c=candidate: self.predict(c, s))
            if us is not None:
                estimates.append((us, candidate.index, candidate))
        if not estimates:
            return []
        best = min(us for us, _, _ in estimates)
        near_best_ones = sorted(e for e in estimates if e[0] <= CONTENDER_SLACK * best)
        return [candidate for _, _, candidate in near_best_ones[:PREDICTED_CONTENDERS]]


__all__ = ["PREDICTED_CONTENDERS", "REFINE_STEP", "RefinePlanner"]
