"""Per-key request rate limits, with the ``limits`` library's moving window (in this
process's memory: each API process counts its own requests)."""

from __future__ import annotations

import math
import time

from limits import RateLimitItem, parse
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter


class RateLimiter:
    """Counts each key's requests against one limit, e.g. ``"600/minute"``.

    Args:
        limit: the limit in the ``limits`` notation (``N/second|minute|hour``).
    """

    def __init__(self, limit: str) -> None:
        self.item: RateLimitItem = parse(limit)
        self._limiter = MovingWindowRateLimiter(MemoryStorage())

    def hit(self, key_id: int) -> float | None:
        """Count one request of ``key_id``: ``None`` if allowed, else the seconds to wait."""
        if self._limiter.hit(self.item, str(key_id)):
            return None
        stats = self._limiter.get_window_stats(self.item, str(key_id))
        return max(1.0, math.ceil(stats.reset_time - time.time()))
