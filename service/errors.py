"""Errors the service raises on purpose; the API maps each to a 4xx (or 503) answer."""

from __future__ import annotations

from typing import Any


class InvalidRequest(ValueError):
    """A request that is well-formed JSON but wrong; each error names its field.

    Args:
        errors: ``{"loc": (...), "msg": str, "type": str}`` items; ``loc`` is the path in
            the request part (``("params", "m")``), as pydantic writes it.
        where: the request part: ``body`` or ``query``.
    """

    def __init__(self, errors: list[dict[str, Any]], where: str = "body") -> None:
        super().__init__("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors))
        self.errors = errors
        self.where = where


_WHERE = ("body", "query", "path", "header", "cookie")


def error_item(loc: Any, msg: str, type_: str) -> dict[str, Any]:
    """One ``detail`` item: ``loc`` (a JSON list), its dotted ``field``, ``msg``, ``type``."""
    parts = [p if isinstance(p, int) else str(p) for p in (loc or ("body",))]
    inner = parts[1:] if parts[0] in _WHERE and len(parts) > 1 else parts
    return {
        "loc": parts,
        "field": ".".join(str(p) for p in inner),
        "msg": str(msg),
        "type": str(type_),
    }


class Conflict(InvalidRequest):
    """A request the named resource's state does not allow now (409); ``errors`` as
    :class:`InvalidRequest`'s."""


class NotFound(LookupError):
    """The named run, kernel or schedule does not exist."""


class Unauthorized(PermissionError):
    """No API key, or one that is malformed, unknown or revoked (401)."""


class Forbidden(PermissionError):
    """A valid key without the scope a request needs, or not the run's owner, or a
    dashboard session's write without its CSRF token (403); ``field`` names the header
    at fault."""

    def __init__(self, message: str, *, field: str = "authorization") -> None:
        super().__init__(message)
        self.field = field


class TooManyRequests(RuntimeError):
    """A rate limit or a queue quota is reached (429); ``retry_after_s`` says when to
    try again, ``field`` what was exceeded."""

    def __init__(self, message: str, *, retry_after_s: float, field: str) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.field = field
