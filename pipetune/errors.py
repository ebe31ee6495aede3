"""What the client raises: the service's answer, typed, with the field it names."""

from __future__ import annotations

from typing import Any


class PipetuneError(Exception):
    """Base of every error the client raises."""


class ApiError(PipetuneError):
    """The service answered with an error status.

    Attributes:
        status: the HTTP status.
        detail: the body's ``detail`` (a message, or a list of ``{loc, field, msg, type}``).
        field: the first item's dotted field (``params.m``), or None.
        message: the first item's message, or the detail itself.
    """

    def __init__(self, status: int, detail: Any) -> None:
        self.status = status
        self.detail = detail
        first = detail[0] if isinstance(detail, list) and detail else None
        self.field: str | None = first.get("field") if isinstance(first, dict) else None
        self.message = str(first.get("msg", "")) if isinstance(first, dict) else str(detail)
        where = f"{self.field}: " if self.field else ""
        super().__init__(f"{status}: {where}{self.message}")


class BadRequest(ApiError):
    """400 / 422: the request is wrong; ``field`` names what."""


class NotFound(ApiError):
    """404: no such run, schedule or kernel."""


class Conflict(ApiError):
    """409: e.g. cancelling a run that has already finished."""


class Unavailable(ApiError):
    """503 (the database is down, try again) or another 5xx."""


def api_error(status: int, body: Any) -> ApiError:
    """The typed error of an error answer."""
    detail = body.get("detail", body) if isinstance(body, dict) else body
    kind = {400: BadRequest, 422: BadRequest, 404: NotFound, 409: Conflict}.get(status)
    if kind is None:
        kind = Unavailable if status >= 500 else ApiError
    return kind(status, detail)


__all__ = ["ApiError", "BadRequest", "Conflict", "NotFound", "PipetuneError", "Unavailable",
           "api_error"]
