"""What every HTTP request passes before a route sees it (pure ASGI middleware, so that a
refused request costs no thread and no database connection):

- NUL bytes in the query string: 422 naming the parameter (PostgreSQL cannot store them);
- a body on anything but JSON: 415; a body over ``max_body`` bytes, declared or streamed
  (chunked): 413; a body not read within ``body_timeout_s``: 408. The body is read here,
  once, and replayed to the app;
- a write (POST, PUT, PATCH, DELETE) while the database is unusable (a deleted or replaced
  SQLite file): 503;
- admission: at most ``app.state.gate`` requests in the app at once; the rest wait in the
  event loop, first come first served. Each handler holds at most one pooled connection
  and the pools are larger than the gate, so a handler never waits for a connection that
  another request, itself waiting for a thread, holds (fastapi#3205). Event streams,
  ``/healthz`` and ``/metrics`` do not queue.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qsl

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import error_item

_WRITES = {"POST", "PUT", "PATCH", "DELETE"}
_UNGATED = ("/healthz", "/metrics")


def _ungated(path: str) -> bool:
    return path in _UNGATED or path.endswith("/events")


async def _answer(send: Send, status: int, detail: object) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _field_error(loc: tuple[str, ...], msg: str, type_: str) -> list[dict[str, object]]:
    return [error_item(loc, msg, type_)]


def nul_parameter(query_string: bytes) -> str | None:
    """The first query parameter whose name or value holds a NUL byte, or None."""
    text = query_string.decode("latin-1")
    if "\x00" not in text and "%00" not in text:
        return None
    for name, value in parse_qsl(text, keep_blank_values=True):
        if "\x00" in name or "\x00" in value:
            return name.replace("\x00", "") or "query"
    return None


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


class RequestGuard:
    """The middleware (see the module docstring).

    Args:
        app: the ASGI app behind it.
        max_body: largest body accepted, bytes.
        body_timeout_s: time allowed to receive a whole body.
    """

    def __init__(self, app: ASGIApp, *, max_body: int, body_timeout_s: float) -> None:
        self.app = app
        self.max_body = max_body
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        name = nul_parameter(scope.get("query_string", b""))
        if name is not None:
            await _answer(send, 422, _field_error(("query", name), "must not contain NUL "
                                                  "bytes", "string_nul"))
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        body_receive = await self._read_body(scope, receive, send, headers)
        if body_receive is None:
            return
        state = scope["app"].state
        if scope["method"] in _WRITES:
            problem = state.db.problem() if hasattr(state, "db") else None
            if problem is not None:
                await _answer(send, 503, f"database unavailable ({problem}); writes are "
                              "refused until the server is restarted on a usable database")
                return
        gate = getattr(state, "gate", None)
        if gate is None or _ungated(scope["path"]):
            await self.app(scope, body_receive, send)
            return
        async with gate:
            await self.app(scope, body_receive, send)

    async def _read_body(
        self, scope: Scope, receive: Receive, send: Send, headers: dict[str, str]
    ) -> Receive | None:
        """The body, read and checked, as a ``receive`` that replays it; None once a
        refusal was sent."""
        length = headers.get("content-length")
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        if length is None and not chunked:
            return receive
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            await self._too_large(send)
            return None
        if (chunked or int(length or 0) > 0) and not _is_json(headers.get("content-type", "")):
            await _answer(send, 415, _field_error(
                ("header", "content-type"), "the body must be application/json",
                "unsupported_media_type"))
            return None
        chunks: list[bytes] = []
        size = 0
        with anyio.move_on_after(self.body_timeout_s) as timer:
            more = True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return None
                chunks.append(message.get("body", b""))
                size += len(chunks[-1])
                if size > self.max_body:
                    await self._too_large(send)
                    return None
                more = message.get("more_body", False)
        if timer.cancelled_caught:
            await _answer(send, 408, _field_error(
                ("body",), f"body not received within {self.body_timeout_s:g} s",
                "body_timeout"))
            return None
        return _replay(b"".join(chunks), receive)

    async def _too_large(self, send: Send) -> None:
        await _answer(send, 413, _field_error(
            ("body",), f"body larger than {self.max_body} bytes", "too_large"))


def _replay(body: bytes, receive: Receive) -> Callable[[], Awaitable[Message]]:
    """A ``receive`` that gives ``body`` once, then waits for the disconnect."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
