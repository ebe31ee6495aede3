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


class NotFound(LookupError):
    """The named run, kernel or schedule does not exist."""
