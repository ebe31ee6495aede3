"""Exception handlers: every error is JSON ``{"detail": ...}`` with a 4xx that names the
field (``loc`` as pydantic writes it, ``field`` as a dotted path), a 503 when the database
is down, and a 500 only for a bug (logged, never with internals in the body)."""

from __future__ import annotations

import logging
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.api.auth import SESSION_COOKIE
from service.db.repositories import StorageError
from service.errors import (
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    TooManyRequests,
    Unauthorized,
    error_item,
)

logger = logging.getLogger(__name__)

async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    items = []
    status = 422
    for error in exc.errors():
        if error.get("type") == "json_invalid":
            status = 400
            items.append(error_item(("body",), f"body is not valid JSON: {error.get('msg')}",
                                    "json_invalid"))
            continue
        items.append(error_item(error.get("loc"), error.get("msg", ""), error.get("type", "")))
    return JSONResponse({"detail": items}, status_code=status)


async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    # FastAPI answers a body it could not parse for another reason than bad JSON (nested
    # too deeply for the decoder, say) with a bare 400 string: name the field.
    if exc.status_code == 400 and exc.detail == "There was an error parsing the body":
        return JSONResponse(
            {"detail": [error_item(("body",), "body could not be parsed as JSON",
                                   "json_invalid")]},
            status_code=400,
        )
    return await http_exception_handler(request, exc)


async def _invalid_request(request: Request, exc: InvalidRequest) -> JSONResponse:
    items = [error_item((exc.where, *e["loc"]), e["msg"], e["type"]) for e in exc.errors]
    return JSONResponse({"detail": items}, status_code=422)


async def _conflict(request: Request, exc: Conflict) -> JSONResponse:
    items = [error_item((exc.where, *e["loc"]), e["msg"], e["type"]) for e in exc.errors]
    return JSONResponse({"detail": items}, status_code=409)


async def _not_found(request: Request, exc: NotFound) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=404)


async def _unauthorized(request: Request, exc: Unauthorized) -> Response:
    response: Response
    # A dashboard page in a browser goes to the page that takes a key instead.
    if not request.url.path.startswith("/v1") and "text/html" in request.headers.get(
            "accept", ""):
        response = RedirectResponse(f"/login?{urlencode({'next': request.url.path})}",
                                    status_code=303)
    else:
        response = JSONResponse(
            {"detail": [error_item(("header", "authorization"), str(exc), "unauthorized")]},
            status_code=401, headers={"WWW-Authenticate": 'Bearer realm="pipetune"'})
    if SESSION_COOKIE in request.cookies:  # an ended session: the browser forgets it
        response.delete_cookie(SESSION_COOKIE)
    return response


async def _forbidden(request: Request, exc: Forbidden) -> JSONResponse:
    return JSONResponse(
        {"detail": [error_item(("header", exc.field), str(exc), "forbidden")]},
        status_code=403)


async def _too_many(request: Request, exc: TooManyRequests) -> JSONResponse:
    return JSONResponse(
        {"detail": [error_item((exc.field,), str(exc), "too_many_requests")]},
        status_code=429, headers={"Retry-After": str(int(exc.retry_after_s))})


async def _storage_error(request: Request, exc: StorageError) -> JSONResponse:
    logger.error("database error on %s %s: %s", request.method, request.url.path, exc)
    return JSONResponse({"detail": "database unavailable; try again"}, status_code=503)


async def _recursion_error(request: Request, exc: RecursionError) -> JSONResponse:
    # json.loads of a body nested thousands deep raises RecursionError, not a decode error.
    return JSONResponse(
        {"detail": [error_item(("body",), "body is nested too deeply", "json_invalid")]},
        status_code=400,
    )


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unhandled error on %s %s", request.method, request.url.path)
    return JSONResponse({"detail": "internal error (a bug: please report it)"}, status_code=500)


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(InvalidRequest, _invalid_request)  # type: ignore[arg-type]
    app.add_exception_handler(NotFound, _not_found)  # type: ignore[arg-type]
    app.add_exception_handler(Conflict, _conflict)  # type: ignore[arg-type]
    app.add_exception_handler(StorageError, _storage_error)  # type: ignore[arg-type]
    app.add_exception_handler(Unauthorized, _unauthorized)  # type: ignore[arg-type]
    app.add_exception_handler(Forbidden, _forbidden)  # type: ignore[arg-type]
    app.add_exception_handler(TooManyRequests, _too_many)  # type: ignore[arg-type]
    app.add_exception_handler(RecursionError, _recursion_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected)

