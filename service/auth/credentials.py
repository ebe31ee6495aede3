"""What a presented token proved (a :class:`Credential`), and a short-lived cache of
them so that a keyed request does not query the database each time.

Without it every keyed request read the keys table: 198 requests/s against 432 without a
key on the audit's 2-core machine (issue 42). An entry lives ``Settings.key_cache_s``
(a second); revoking a key in this process forgets its entries at once
(:func:`forget_key`, called by ``service.db.keys.revoke_key``), and a revocation by
another process (``pipetune keys revoke``) is seen when the entry expires.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass

from service.auth.principal import Principal
from service.auth.tokens import fingerprint

#: Entries kept at most (the oldest go first): one per live key or session in use.
MAX_ENTRIES = 10_000


@dataclass(frozen=True)
class Credential:
    """Who a token is, and for a dashboard session what its writes must carry.

    Attributes:
        principal: the key's principal.
        csrf_token: the session's CSRF token; ``None`` for an API key, which a browser
            never sends by itself (no cross-site request can carry it).
        session_id: the session row's id (the secret's fingerprint), for logout.
    """

    principal: Principal
    csrf_token: str | None = None
    session_id: str | None = None


class CredentialCache:
    """Presented tokens (by fingerprint and kind) to what they proved, for ``ttl_s``.

    Thread-safe: lookups run in the API's worker threads. Only successful lookups are
    kept; a failed one is counted against the client's address instead.

    Args:
        ttl_s: seconds an entry is trusted (0: nothing is kept).
    """

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._entries: OrderedDict[tuple[str, str], tuple[float, Credential]] = OrderedDict()
        self._lock = threading.Lock()
        _CACHES.add(self)

    def get(self, kind: str, token: str) -> Credential | None:
        """The credential of ``token`` (``kind``: ``key`` or ``session``) if still fresh."""
        entry_key = (kind, fingerprint(token))
        with self._lock:
            entry = self._entries.get(entry_key)
            if entry is None:
                return None
            if entry[0] <= time.monotonic():
                del self._entries[entry_key]
                return None
            return entry[1]

    def put(self, kind: str, token: str, credential: Credential,
            expires_in_s: float | None = None) -> None:
        """Keep ``credential`` for ``ttl_s`` (or ``expires_in_s``, if sooner)."""
        life_s = self.ttl_s if expires_in_s is None else min(self.ttl_s, expires_in_s)
        if life_s <= 0:
            return
        entry_key = (kind, fingerprint(token))
        with self._lock:
            self._entries[entry_key] = (time.monotonic() + life_s, credential)
            self._entries.move_to_end(entry_key)
            while len(self._entries) > MAX_ENTRIES:
                self._entries.popitem(last=False)

    def forget_session(self, session_id: str) -> None:
        """Drop the entry of one session (logout)."""
        with self._lock:
            self._entries.pop(("session", session_id), None)

    def forget_key(self, key_id: int) -> None:
        """Drop every entry of one key: the key's own and its sessions'."""
        with self._lock:
            stale = [k for k, (_, c) in self._entries.items() if c.principal.key_id == key_id]
            for entry_key in stale:
                del self._entries[entry_key]


#: Every cache of this process, so that a revocation reaches them all.
_CACHES: weakref.WeakSet[CredentialCache] = weakref.WeakSet()


def forget_key(key_id: int) -> None:
    """Forget ``key_id`` in every cache of this process (it was just revoked)."""
    for cache in list(_CACHES):
        cache.forget_key(key_id)
