"""Reads and writes of the API keys table (``pipetune keys``, and the API's check of a
presented token)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import event, func, select
from sqlalchemy.orm import Session

from service.auth.credentials import forget_key
from service.auth.tokens import IssuedKey, parse, verify
from service.db.models import ACTIVE_STATUSES, ApiKeyModel, RunModel, RunStatus, utcnow
from service.db.sessions import end_sessions_of_key


def create_key(
    session: Session, *, name: str, scopes: Sequence[str], issued: IssuedKey
) -> ApiKeyModel:
    """Store a new key (its digest, never its secret)."""
    key = ApiKeyModel(name=name, prefix=issued.prefix, salt=issued.salt,
                      digest=issued.digest, scopes=sorted(set(scopes)), created_at=utcnow())
    session.add(key)
    session.flush()
    return key


def list_keys(session: Session, *, include_revoked: bool = True) -> list[ApiKeyModel]:
    query = select(ApiKeyModel).order_by(ApiKeyModel.id)
    if not include_revoked:
        query = query.where(ApiKeyModel.revoked_at.is_(None))
    return list(session.scalars(query))


def revoke_key(session: Session, *, key_id: int) -> ApiKeyModel | None:
    """Revoke a key (idempotent) and end its dashboard sessions; ``None`` if there is no
    such key. Once committed, this process's key caches forget it at once (another
    process's within its ``key_cache_s``)."""
    key = session.get(ApiKeyModel, key_id)
    if key is not None and key.revoked_at is None:
        key.revoked_at = utcnow()
    if key is not None:
        end_sessions_of_key(session, key_id=key_id)
        event.listen(session, "after_commit", lambda _: forget_key(key_id), once=True)
    return key


def authenticate(session: Session, *, token: str) -> ApiKeyModel | None:
    """The live key whose token this is, else ``None`` (malformed, unknown, wrong secret
    or revoked)."""
    parsed = parse(token)
    if parsed is None:
        return None
    prefix, secret = parsed
    key = ApiKeyModel.find_by_prefix(session, prefix)
    if key is None or key.revoked_at is not None:
        return None
    return key if verify(secret, salt=key.salt, digest=key.digest) else None


#: The PostgreSQL advisory lock that admits runs one at a time: ``b"pipetune"`` read as a
#: 64-bit number, so it cannot meet another application's lock by chance.
ADMISSION_LOCK_ID = int.from_bytes(b"pipetune", "big")


def lock_admission(session: Session) -> None:
    """Hold the lock on admitting runs until ``session``'s transaction ends, so that the
    quota counts and the run queued after them are one step for concurrent requests.

    PostgreSQL: a transaction-scoped advisory lock, released at commit or rollback; the
    counts after it see the runs the previous holder committed (READ COMMITTED, the
    engine's isolation, takes a snapshot per statement). It is database-wide, so every
    process (and every schema) of one database shares it: runs are admitted one at a
    time there, a few milliseconds each. SQLite: nothing to take; a write session begins
    with ``BEGIN IMMEDIATE`` (``service.core.db``), so its transaction already holds the
    database's only write lock.
    """
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_advisory_xact_lock(ADMISSION_LOCK_ID)))


def count_active_runs(session: Session, *, key_id: int | None = None) -> int:
    """Queued and running runs, of one key if given."""
    query = select(func.count()).select_from(RunModel).where(
        RunModel.status.in_(ACTIVE_STATUSES))
    if key_id is not None:
        query = query.where(RunModel.key_id == key_id)
    return session.scalar(query) or 0


def count_queued_runs(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(RunModel).where(
        RunModel.status == RunStatus.QUEUED.value)) or 0
