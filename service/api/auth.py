"""Who makes a request, and whether it may: the API key from ``Authorization: Bearer``
(or the dashboard's cookie), its scopes, and its rate limit.

Where keys are not required (``Settings.require_auth`` off: loopback use) a request
without a key is the anonymous local user, who may do everything, as before keys
existed; a key given anyway is checked and owns the runs it makes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import anyio
from fastapi import Depends, Request

from service.auth import ANONYMOUS, Principal, RateLimiter
from service.db import keys as keys_repo
from service.db.repositories import session_scope
from service.errors import Forbidden, TooManyRequests, Unauthorized

#: The dashboard keeps its key in this (HttpOnly, SameSite=Strict) cookie.
KEY_COOKIE = "pipetune_key"


def _presented_token(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header is not None:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("the Authorization header must be 'Bearer <API key>'")
        return token.strip()
    return request.cookies.get(KEY_COOKIE) or None


async def authenticate(request: Request) -> Principal:
    """The request's principal (once per request), its key's rate limit counted. The key
    is looked up in a worker thread; a request without one needs no thread at all.

    Raises:
        Unauthorized: no key where one is required, or a key that is not valid.
        TooManyRequests: the key's rate limit is reached.
    """
    cached = getattr(request.state, "principal", None)
    if cached is not None:
        return cached
    app = request.app
    token = _presented_token(request)
    if token is None:
        if app.state.settings.require_auth:
            raise Unauthorized("this server needs an API key: send 'Authorization: Bearer "
                               "<key>' (pipetune keys create makes one)")
        principal = ANONYMOUS
    else:
        principal = await anyio.to_thread.run_sync(_principal_of, app, token)
        limiter: RateLimiter = app.state.rate_limiter
        wait_s = limiter.hit(principal.key_id)
        if wait_s is not None:
            raise TooManyRequests(f"API key '{principal.name}' made more than "
                                  f"{app.state.settings.rate_limit} requests",
                                  retry_after_s=wait_s, field="rate_limit")
    request.state.principal = principal
    return principal


def _principal_of(app: Any, token: str) -> Principal:
    with session_scope(app.state.db.read_sessions) as session:
        key = keys_repo.authenticate(session, token=token)
        if key is None:
            raise Unauthorized("the API key is not valid (unknown, malformed or revoked)")
        return Principal(key.id, key.name, frozenset(key.scopes))


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
