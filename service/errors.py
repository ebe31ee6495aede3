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


class NotFound(LookupError):
    """The named run, kernel or schedule does not exist."""
