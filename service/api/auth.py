"""Who makes a request, and whether it may: the API key from ``Authorization: Bearer``
or the dashboard's session cookie, its scopes, and the rate limits.

Where keys are not required (``Settings.require_auth`` off: loopback use) a request
without a key is the anonymous local user, who may do everything, as before keys
existed; a key given anyway is checked and owns the runs it makes.

A checked key or session is trusted for ``Settings.key_cache_s`` without asking the
database (``service.auth.credentials``). A session is the browser's ambient credential,
so its writes (anything but GET, HEAD, OPTIONS) must also carry the session's CSRF token
in ``X-CSRF-Token``; a key in the Authorization header is never sent by a browser on its
own and needs none. Failed attempts count against the client's address
(``Settings.auth_failure_limit``); past the limit every attempt from it is a 429 before
any lookup.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import anyio
from fastapi import Depends, FastAPI, Request

from service.auth import ANONYMOUS, Principal, RateLimiter
from service.auth.credentials import Credential, CredentialCache
from service.core.config import Settings
from service.db import keys as keys_repo
from service.db import sessions as sessions_repo
from service.db.models import as_utc, utcnow
from service.db.repositories import session_scope
from service.errors import Forbidden, TooManyRequests, Unauthorized

#: The dashboard's session cookie (HttpOnly, SameSite=Lax): a session's random secret.
SESSION_COOKIE = "pipetune_session"
#: The header a session's writes carry its CSRF token in.
CSRF_HEADER = "x-csrf-token"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def install_auth(app: FastAPI, settings: Settings) -> None:
    """Give ``app`` its per-key rate limiter, its failed-attempt limiter and its cache of
    checked keys and sessions."""
    app.state.rate_limiter = RateLimiter(settings.rate_limit)
    app.state.auth_failures = RateLimiter(settings.auth_failure_limit)
    app.state.credentials = CredentialCache(settings.key_cache_s)


def client_address(request: Request) -> str:
    """The address failed attempts are counted against (uvicorn takes it from
    ``X-Forwarded-For`` only behind a proxy it trusts, ``--forwarded-allow-ips``)."""
    return request.client.host if request.client is not None else "unknown"


def refuse_if_failing(request: Request) -> None:
    """Raise :class:`TooManyRequests` if the client's address is past its failed-attempt
    limit (checked before a key is looked up, so a flood of wrong keys costs no query)."""
    wait_s = request.app.state.auth_failures.check(client_address(request))
    if wait_s is not None:
        raise TooManyRequests(
            f"too many failed API key attempts from this address (more than "
            f"{request.app.state.settings.auth_failure_limit})",
            retry_after_s=wait_s, field="auth_failure_limit")


def count_failure(request: Request) -> None:
    """Count one failed key attempt (or login) of the client's address."""
    request.app.state.auth_failures.hit(client_address(request))


def _presented(request: Request) -> tuple[str, str] | None:
    """``(kind, token)``: ``key`` from the Authorization header, else ``session`` from
    the cookie; ``None`` without either."""
    header = request.headers.get("authorization")
    if header is not None:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("the Authorization header must be 'Bearer <API key>'")
        return "key", token.strip()
    cookie = request.cookies.get(SESSION_COOKIE)
    return ("session", cookie) if cookie else None


async def credential_of(request: Request, kind: str, token: str) -> Credential:
    """What ``token`` proves: from the cache, else looked up in a worker thread (and kept).

    Raises:
        TooManyRequests: the client's address is past its failed-attempt limit.
        Unauthorized: the key or session is not valid (counted as a failure).
    """
    refuse_if_failing(request)
    cache: CredentialCache = request.app.state.credentials
    credential = cache.get(kind, token)
    if credential is not None:
        return credential
    found = await anyio.to_thread.run_sync(_look_up, request.app, kind, token)
    if found is None:
        count_failure(request)
        if kind == "session":
            raise Unauthorized("the dashboard session has ended (logged out, expired, or "
                               "its key revoked): log in again")
        raise Unauthorized("the API key is not valid (unknown, malformed or revoked)")
    credential, expires_in_s = found
    cache.put(kind, token, credential, expires_in_s)
    return credential


def _look_up(app: Any, kind: str, token: str) -> tuple[Credential, float | None] | None:
    """The credential of ``token`` from the database, and for a session the seconds it
    has left; ``None`` if it proves nothing."""
    with session_scope(app.state.db.read_sessions) as session:
        if kind == "key":
            key = keys_repo.authenticate(session, token=token)
            return None if key is None else (Credential(_principal(key)), None)
        found = sessions_repo.find_session(session, secret=token)
        if found is None:
            return None
        row, key = found
        expires_at = as_utc(row.expires_at)
        left_s = (expires_at - utcnow()).total_seconds() if expires_at is not None else 0.0
        return Credential(_principal(key), row.csrf_token, row.id), left_s


def _principal(key: Any) -> Principal:
    return Principal(key.id, key.name, frozenset(key.scopes))


def check_csrf(request: Request, credential: Credential) -> None:
    """Raise :class:`Forbidden` unless a session's write carries its CSRF token."""
    if credential.csrf_token is None or request.method in _SAFE_METHODS:
        return
    sent = request.headers.get(CSRF_HEADER, "")
    if not hmac.compare_digest(sent.encode(), credential.csrf_token.encode()):
        raise Forbidden("a dashboard session's writes need its CSRF token in the "
                        "X-CSRF-Token header (the pages send it)", field=CSRF_HEADER)


async def authenticate(request: Request) -> Principal:
    """The request's principal (once per request), its key's rate limit counted.

    Raises:
        Unauthorized: no key where one is required, or a key or session that is not valid.
        Forbidden: a session's write without its CSRF token.
        TooManyRequests: the key's rate limit, or the address's failed attempts.
    """
    cached = getattr(request.state, "principal", None)
    if cached is not None:
        return cached
    app = request.app
    presented = _presented(request)
    if presented is None:
        if app.state.settings.require_auth:
            raise Unauthorized("this server needs an API key: send 'Authorization: Bearer "
                               "<key>' (pipetune keys create makes one)")
        principal = ANONYMOUS
    else:
        credential = await credential_of(request, *presented)
        check_csrf(request, credential)
        principal = credential.principal
        request.state.credential = credential
        wait_s = app.state.rate_limiter.hit(principal.key_id)
        if wait_s is not None:
            raise TooManyRequests(f"API key '{principal.name}' made more than "
                                  f"{app.state.settings.rate_limit} requests",
                                  retry_after_s=wait_s, field="rate_limit")
    request.state.principal = principal
    return principal


def require(scope: str) -> Callable[[Request], Awaitable[Principal]]:
    """A dependency: the principal, if it has ``scope`` (else 403)."""

    async def dependency(request: Request) -> Principal:
        principal = await authenticate(request)
        if not principal.allows(scope):
            raise Forbidden(f"API key '{principal.name}' lacks the '{scope}' scope "
                            f"(it has: {', '.join(sorted(principal.scopes)) or 'none'})")
        return principal

    dependency.__name__ = f"require_{scope}"
    return dependency


require_read = require("read")
require_tune = require("tune")

ReaderDep = Annotated[Principal, Depends(require_read)]
TunerDep = Annotated[Principal, Depends(require_tune)]


def check_can_manage(principal: Principal, run_id: int, run_key_id: int | None) -> None:
    """Raise :class:`Forbidden` unless ``principal`` owns the run or is an admin."""
    if not principal.can_manage(run_key_id):
        raise Forbidden(f"run {run_id} belongs to another API key; only its owner or an "
                        "admin key may change it")
