"""The dashboard's key: ``/login`` takes an API key (checked, then kept in an HttpOnly,
SameSite=Strict cookie that the pages and their API calls send), ``/logout`` forgets it.

The login page posts the key as JSON (the API takes JSON bodies only) and then goes
where the answer's ``next`` says."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from pydantic import BaseModel, Field

from service.api.auth import KEY_COOKIE
from service.db import keys as keys_repo
from service.db.repositories import session_scope
from service.errors import error_item


class LoginRequest(BaseModel):
    """Body of ``POST /login``: the key, and the dashboard page to go back to."""

    key: str = Field(max_length=256)
    next: str | None = Field(default=None, max_length=512)


def _safe_next(target: str | None) -> str:
    """Only a path of this site (never ``//host``) to go back to."""
    return target if target and target.startswith("/") and not target.startswith("//") else "/"


def login_router(templates: Jinja2Templates) -> APIRouter:
    """The login and logout routes, rendered with the dashboard's ``templates``."""
    router = APIRouter(include_in_schema=False)

    @router.get("/login", response_class=HTMLResponse)
    def login_page(request: Request,
                   next: Annotated[str | None, Query(max_length=512)] = None) -> Response:
        return templates.TemplateResponse(request, "login.html",
                                          {"next": _safe_next(next), "error": None})

    @router.post("/login")
    def login(request: Request, body: LoginRequest) -> Response:
        token, target = body.key.strip(), _safe_next(body.next)
        with session_scope(request.app.state.db.read_sessions) as session:
            valid = bool(token) and keys_repo.authenticate(session, token=token) is not None
        if not valid:
            return JSONResponse({"detail": [error_item(("body", "key"), "that key is not "
                                                       "valid", "unauthorized")]},
                                status_code=401)
        response = JSONResponse({"next": target})
        response.set_cookie(KEY_COOKIE, token, httponly=True, samesite="strict",
                            secure=request.url.scheme == "https")
        return response

    @router.post("/logout")
    def logout() -> Response:
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(KEY_COOKIE)
        return response

    return router
