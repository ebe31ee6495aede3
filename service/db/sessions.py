"""Reads and writes of the dashboard's sessions (``service.db.models.SessionModel``):
made at login, found by the cookie's secret, ended by logout or the key's revocation."""

from __future__ import annotations

import datetime as dt
import secrets

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from service.auth.tokens import fingerprint, session_secret
from service.db.models import ApiKeyModel, SessionModel, as_utc, utcnow


def create_session(session: Session, *, key_id: int, ttl_s: float) -> tuple[str, SessionModel]:
    """A new session of key ``key_id`` lasting ``ttl_s``: the cookie's secret (returned
    once, stored only as its fingerprint) and the row. Expired rows are cleared first."""
    now = utcnow()
    session.execute(delete(SessionModel).where(SessionModel.expires_at < now))
    secret = session_secret()
    row = SessionModel(id=fingerprint(secret), key_id=key_id,
                       csrf_token=secrets.token_urlsafe(32), created_at=now,
                       expires_at=now + dt.timedelta(seconds=ttl_s))
    session.add(row)
    session.flush()
    return secret, row


def find_session(session: Session, *, secret: str) -> tuple[SessionModel, ApiKeyModel] | None:
    """The live session whose cookie holds ``secret``, with its key; ``None`` if there is
    none, it expired, or its key was revoked."""
    row = session.execute(
        select(SessionModel, ApiKeyModel)
        .join(ApiKeyModel, ApiKeyModel.id == SessionModel.key_id)
        .where(SessionModel.id == fingerprint(secret), ApiKeyModel.revoked_at.is_(None))
    ).one_or_none()
    if row is None:
        return None
    found, key = row
    expires_at = as_utc(found.expires_at)
    return None if expires_at is None or expires_at <= utcnow() else (found, key)


def end_session(session: Session, *, session_id: str) -> None:
    """Delete one session (logout); nothing if it is gone already."""
    session.execute(delete(SessionModel).where(SessionModel.id == session_id))


def end_sessions_of_key(session: Session, *, key_id: int) -> None:
    """Delete every session of a key (it is being revoked)."""
    session.execute(delete(SessionModel).where(SessionModel.key_id == key_id))
