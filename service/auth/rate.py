"""Request rate limits with the ``limits`` library's moving window (in this process's
memory: each API process counts its own): per API key, and of failed key attempts per
client address."""

from __future__ import annotations

import math
import time

from limits import RateLimitItem, parse
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter


class RateLimiter:
    """Counts events of each subject (a key id, a client address) against one limit,
    e.g. ``"600/minute"``.

    Args:
        limit: the limit in the ``limits`` notation (``N/second|minute|hour``).
    """

    def __init__(self, limit: str) -> None:
        self.item: RateLimitItem = parse(limit)
        self._limiter = MovingWindowRateLimiter(MemoryStorage())

    def hit(self, subject: int | str) -> float | None:
        """Count one event of ``subject``: ``None`` if allowed, else the seconds to wait."""
        if self._limiter.hit(self.item, str(subject)):
            return None
        return self._wait_s(subject)

    def check(self, subject: int | str) -> float | None:
        """Whether ``subject`` may have one more event, counting none: ``None`` if so,
        else the seconds to wait."""
        if self._limiter.test(self.item, str(subject)):
            return None
        return self._wait_s(subject)

    def _wait_s(self, subject: int | str) -> float:
        stats = self._limiter.get_window_stats(self.item, str(subject))
        return max(1.0, math.ceil(stats.reset_time - time.time()))
