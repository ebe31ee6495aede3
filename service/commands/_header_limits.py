"""Limits on a request's head (its request line and headers), kept by the HTTP protocol
itself while the head arrives, so that no request header can freeze the server.

uvicorn's httptools protocol has none: llhttp hands a long header value over in pieces
and httptools joins them, one copy of the value so far per piece, so a 60 MB header held
the event loop (and ``/healthz``) for 12.4 s and eight of them took the server from 189
to 425 MB (issue 42). h11 refuses a head that stays incomplete past its
``max_incomplete_event_size`` (a 400), but counts no headers and lets a longer head in
when it arrives in one read. A middleware is too late for either: the head is read whole
before the app sees a request.

Here both parsers answer **431 Request Header Fields Too Large** as soon as the head
passes ``Settings.max_header_bytes`` (32 KB: nginx allows 4 x 8 KB lines, Node.js and h11
16 KB) or ``Settings.max_headers`` fields (100, as Apache's ``LimitRequestFields``), with
a JSON body naming the limit like the API's other 4xx answers. The connection then shuts
its writing side and throws away what the client still sends for a moment before it
closes (as nginx's lingering close does), so that the client reads the answer rather
than a reset.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11

from service.core.config import Settings
from service.errors import error_item

#: Seconds a refused connection keeps reading (and dropping) what the client still sends
#: before it closes, so that its kernel does not answer the unread bytes with a reset.
LINGER_S = 1.0


def _default(name: str) -> int:
    return int(Settings.model_fields[name].default)


def refusal(message: str, type_: str) -> bytes:
    """A whole ``431`` HTTP/1.1 response whose JSON body says which limit was passed."""
    body = json.dumps({"detail": [error_item(("header",), message, type_)]}).encode()
    head = (b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
            b"content-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n"
            b"connection: close\r\n\r\n")
    return head + body


def refuse(loop: asyncio.AbstractEventLoop, transport: asyncio.Transport,
           message: str, type_: str) -> None:
    """Answer 431 on ``transport``, shut its writing side and close it after
    :data:`LINGER_S` (the protocol drops what arrives meanwhile)."""
    if transport.is_closing():
        return
    transport.write(refusal(message, type_))
    if transport.can_write_eof():
        transport.write_eof()
    loop.call_later(LINGER_S, transport.close)


class HeadLimits:
    """The limits, as class attributes of a protocol (``uvicorn_options`` sets them from
    the settings), and the messages that name them."""

    max_header_bytes: int = _default("max_header_bytes")
    max_headers: int = _default("max_headers")

    def too_large(self) -> tuple[str, str]:
        """The 431's message and type for a head past ``max_header_bytes``."""
        return (f"request headers larger than {self.max_header_bytes} bytes",
                "headers_too_large")

    def too_many(self) -> tuple[str, str]:
        """The 431's message and type for more fields than ``max_headers``."""
        return f"more than {self.max_headers} request headers", "too_many_headers"


class HttpToolsHeadLimits(HeadLimits):
    """Mixin before uvicorn's ``HttpToolsProtocol``: counts a head's bytes as they arrive.

    While a head is incomplete the data goes to the parser in pieces no longer than the
    bytes the head may still take, so a head that passes the limit is refused once it has
    passed it, whatever the reads. The fields are counted as httptools completes each.
    A request pipelined behind another in the same read is counted from its parsed parts
    (its URL and whole fields): its head may pass the limit by one read before the 431.
    """

    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    parser: Any
    logger: Any
    _head_done = False  # the current request's head is parsed (its body may follow)
    _head_bytes = 0  # bytes of the head being received
    _head_known = 0  # bytes of it the parser has handed over (URL, whole fields)
    _header_count = 0
    _completed = 0  # requests parsed whole on this connection
    _refused = False

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()  # type: ignore[attr-defined]
        while data and not self._refused:
            awaiting, completed = not self._head_done, self._completed
            room = len(data) if self._head_done else self.max_header_bytes - self._head_bytes
            piece, data = data[:room], data[room:]
            if not self._feed(piece):
                return  # answered (400, 431) or upgraded
            if self._head_done:
                continue
            # The piece ended inside a head: all of it, or the part after the end of a
            # request parsed in it (then only what the parser handed over is known).
            fresh = awaiting and completed == self._completed
            self._head_bytes = self._head_bytes + len(piece) if fresh else self._head_known
            if self._head_bytes >= self.max_header_bytes:
                self._refuse(*self.too_large())

    def _feed(self, piece: bytes) -> bool:
        """Parse ``piece`` as uvicorn does; False once the connection is answered."""
        import httptools

        try:
            self.parser.feed_data(piece)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():  # type: ignore[attr-defined]
                self.handle_websocket_upgrade()  # type: ignore[attr-defined]
            else:
                self._unsupported_upgrade_warning()  # type: ignore[attr-defined]
            return False
        except httptools.HttpParserError:
            if not self._refused:  # else a field past the limit stopped the parser
                self.logger.warning("Invalid HTTP request received.")
                self.send_400_response("Invalid HTTP request received.")  # type: ignore[attr-defined]
            return False
        return not self._refused

    def _refuse(self, message: str, type_: str) -> None:
        self._refused = True
        refuse(self.loop, self.transport, message, type_)

    def on_message_begin(self) -> None:
        self._head_known, self._header_count = 0, 0
        super().on_message_begin()  # type: ignore[misc]

    def on_url(self, url: bytes) -> None:
        self._head_known += len(url)
        super().on_url(url)  # type: ignore[misc]

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_known += len(name) + len(value) + 4  # ": " and CRLF
        self._header_count += 1
        if self._header_count > self.max_headers:
            self._refuse(*self.too_many())
            raise _Refused  # stops the parser: the request goes no further
        super().on_header(name, value)  # type: ignore[misc]

    def on_headers_complete(self) -> None:
        self._head_done = True
        super().on_headers_complete()  # type: ignore[misc]

    def on_message_complete(self) -> None:
        self._head_done, self._head_bytes = False, 0
        self._completed += 1
        super().on_message_complete()  # type: ignore[misc]


class _Refused(Exception):
    """Raised in a parser callback to stop parsing a refused request."""


class _LimitedConnection(h11.Connection):
    """h11's server connection with the byte limit as its incomplete-event limit, and
    the field count and the byte limit checked on each whole request head."""

    def __init__(self, limits: HeadLimits) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=limits.max_header_bytes)
        self.limits = limits
        self.refusal: tuple[str, str] | None = None

    def next_event(self) -> Any:
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as exc:
            if exc.error_status_hint == 431:  # h11's "receive buffer too long"
                self.refusal = self.limits.too_large()
            raise
        if isinstance(event, h11.Request):
            size = len(event.method) + len(event.target) + 11  # "M T HTTP/1.1\r\n"
            size += sum(len(name) + len(value) + 4 for name, value in event.headers)
            if len(event.headers) > self.limits.max_headers:
                self.refusal = self.limits.too_many()
            elif size > self.limits.max_header_bytes:
                self.refusal = self.limits.too_large()
            if self.refusal is not None:
                raise h11.RemoteProtocolError(self.refusal[0], error_status_hint=431)
        return event


class H11HeadLimits(HeadLimits):
    """Mixin before uvicorn's ``H11Protocol``: its h11 connection keeps the limits, and
    a head refused by them is answered 431 (uvicorn answers any parse error 400)."""

    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    conn: Any
    _refused = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn = _LimitedConnection(self)

    def data_received(self, data: bytes) -> None:
        if not self._refused:  # else lingering: what the client still sends is dropped
            super().data_received(data)  # type: ignore[misc]

    def send_400_response(self, msg: str) -> None:
        refusal = self.conn.refusal
        if refusal is None:
            super().send_400_response(msg)  # type: ignore[misc]
            return
        self._refused = True
        refuse(self.loop, self.transport, *refusal)
