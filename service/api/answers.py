"""Answers remembered with the stamp of the rows they were built from.

A cache-hit tune and a list of the cache are read far more often than the cache changes.
:class:`AnswerMemo` keeps the encoded JSON of such an answer beside its stamp
(``service.db.stamps``): a request reads the stamp (one plain query) and, when it equals
the remembered one, gets the remembered bytes without building ORM objects, parsing the
sProgram JSON or validating a response model. The stamp is read *before* the answer is
built, so an answer is never filed under a newer stamp than its rows had.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

#: Answers kept per process (least recently used first out).
MAX_ANSWERS = 512


class AnswerMemo:
    """A bounded, thread-safe map from a request key to (stamp, encoded answer)."""

    def __init__(self, max_answers: int = MAX_ANSWERS) -> None:
        self._entries: OrderedDict[Any, tuple[Any, bytes]] = OrderedDict()
        self._max = max_answers
        self._lock = threading.Lock()

    def get(self, key: Any, stamp: Any) -> bytes | None:
        """The answer remembered for ``key`` if it was built from rows stamped ``stamp``."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] != stamp:
                return None
            self._entries.move_to_end(key)
            return entry[1]

    def put(self, key: Any, stamp: Any, body: bytes) -> None:
        with self._lock:
            self._entries[key] = (stamp, body)
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
