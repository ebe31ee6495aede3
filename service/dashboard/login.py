"""The dashboard's login: ``/login`` takes an API key and opens a server-side session
(``service.db.sessions``) whose random secret is the cookie (HttpOnly, SameSite=Lax,
Secure over https); the key itself never reaches the browser's storage. ``/logout``
deletes the session's row, so a copied cookie stops working too.

The login page posts the key as JSON (the API takes JSON bodies only) with the form's
CSRF token in ``X-CSRF-Token``, which must match the token the page set in its own
cookie (a cross-site page can read neither, so it cannot log a browser into its own
key); then it goes where the answer's ``next`` says, a path of this site only.
"""

from __future__ import annotations

import hmac
import secrets
from typing import Annotated
from urllib.parse import unquote, urlsplit

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.templating import Jinja2Templates
from pydantic import BaseModel, Field

from service.api.auth import (
    CSRF_HEADER,
    SESSION_COOKIE,
    check_csrf,
    count_failure,
    credential_of,
    refuse_if_failing,
)
from service.db import keys as keys_repo
from service.db import sessions as sessions_repo
from service.db.repositories import session_scope
from service.errors import Forbidden, Unauthorized, error_item

#: The login form's CSRF token (double submit: cookie and header must agree).
LOGIN_COOKIE = "pipetune_login"
#: Seconds a login form's token lasts.
LOGIN_FORM_S = 3600


class LoginRequest(BaseModel):
    """Body of ``POST /login``: the key, and the dashboard page to go back to."""

    key: str = Field(max_length=256)
    next: str | None = Field(default=None, max_length=512)


def _stays_here(target: str) -> bool:
    """Whether a browser reads ``target`` as a path of this site: a single leading
    slash, and no backslash or control character (browsers read ``\\`` as ``/`` and
    drop tabs and newlines, so ``/\\evil`` and ``/<tab>/evil`` both mean ``//evil``)."""
    return (target.startswith("/") and not target.startswith("//") and "\\" not in target
            and not any(ord(c) < 0x20 or ord(c) == 0x7F for c in target))


def safe_next(target: str | None) -> str:
    """``target`` if it is a path of this site, as given and once percent-decoded (a
    browser may decode it before it navigates), else ``/``."""
    if not target or not _stays_here(target) or not _stays_here(unquote(target)):
        return "/"
    parts = urlsplit(target)
    return "/" if parts.scheme or parts.netloc else target


def _login_form_token(request: Request) -> str:
    """The login form's CSRF token: the one its cookie holds already (two open login
    tabs share it), else a new one."""
    token = request.cookies.get(LOGIN_COOKIE, "")
    return token if 20 <= len(token) <= 64 else secrets.token_urlsafe(32)


def _check_login_form(request: Request) -> None:
    expected = request.cookies.get(LOGIN_COOKIE, "")
    sent = request.headers.get(CSRF_HEADER, "")
    if not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
        raise Forbidden("the login form's CSRF token is missing or stale: reload /login",
                        field=CSRF_HEADER)


def _open_session(request: Request, token: str) -> str | None:
    """A new session's cookie secret for the key ``token``, or ``None`` if the key is
    not valid."""
    settings = request.app.state.settings
    with session_scope(request.app.state.db.sessions) as session:
        key = keys_repo.authenticate(session, token=token) if token else None
        if key is None:
            return None
        secret, _ = sessions_repo.create_session(session, key_id=key.id,
                                                 ttl_s=settings.session_ttl_s)
        return secret


def login_router(templates: Jinja2Templates) -> APIRouter:
    """The login and logout routes, rendered with the dashboard's ``templates``."""
    router = APIRouter(include_in_schema=False)

    @router.get("/login", response_class=HTMLResponse)
    def login_page(request: Request,
                   next: Annotated[str | None, Query(max_length=512)] = None) -> Response:
        token = _login_form_token(request)
        response = templates.TemplateResponse(
            request, "login.html", {"next": safe_next(next), "login_csrf": token})
        response.set_cookie(LOGIN_COOKIE, token, max_age=LOGIN_FORM_S, path="/login",
                            httponly=True, samesite="strict",
                            secure=request.url.scheme == "https")
        return response

    @router.post("/login")
    def login(request: Request, body: LoginRequest) -> Response:
        _check_login_form(request)
        refuse_if_failing(request)
        secret = _open_session(request, body.key.strip())
        if secret is None:
            count_failure(request)
            return JSONResponse({"detail": [error_item(("body", "key"), "that key is not "
                                                       "valid", "unauthorized")]},
                                status_code=401)
        response = JSONResponse({"next": safe_next(body.next)})
        response.set_cookie(SESSION_COOKIE, secret, path="/", httponly=True,
                            samesite="lax", secure=request.url.scheme == "https")
        response.delete_cookie(LOGIN_COOKIE, path="/login")
        return response

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        secret = request.cookies.get(SESSION_COOKIE)
        if secret:
            try:
                credential = await credential_of(request, "session", secret)
            except Unauthorized:
                credential = None  # ended already: only the cookie is left to clear
            if credential is not None and credential.session_id is not None:
                check_csrf(request, credential)
                await anyio.to_thread.run_sync(_end_session, request, credential.session_id)
        response = JSONResponse({"next": "/login"})
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    return router


def _end_session(request: Request, session_id: str) -> None:
    with session_scope(request.app.state.db.sessions) as session:
        sessions_repo.end_session(session, session_id=session_id)
    request.app.state.credentials.forget_session(session_id)
