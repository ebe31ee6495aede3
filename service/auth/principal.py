"""Who a request is: an API key (its id, name, scopes) or, where keys are not required,
the anonymous local user, who may do everything (today's loopback use)."""

from __future__ import annotations

from dataclasses import dataclass

#: ``read``: look at runs, schedules, kernels; ``tune``: start, resume and cancel one's own
#: runs; ``admin``: cancel or resume anyone's runs. Each implies the ones before it.
SCOPES = ("read", "tune", "admin")


@dataclass(frozen=True)
class Principal:
    """The caller of a request.

    Attributes:
        key_id: the API key's id; ``None`` for the anonymous local user.
        name: the key's name (``anonymous`` without a key).
        scopes: the scopes the key was given.
    """

    key_id: int | None
    name: str
    scopes: frozenset[str]

    def allows(self, scope: str) -> bool:
        """Whether this caller has ``scope`` (a higher scope implies the lower ones)."""
        rank = SCOPES.index(scope)
        return any(SCOPES.index(s) >= rank for s in self.scopes if s in SCOPES)

    def can_manage(self, run_key_id: int | None) -> bool:
        """Whether this caller may cancel or resume a run made by key ``run_key_id``:
        its owner, or an admin."""
        return self.allows("admin") or (self.key_id is not None and self.key_id == run_key_id)


ANONYMOUS = Principal(key_id=None, name="anonymous", scopes=frozenset({"admin"}))
