"""How ``pipetune serve`` runs uvicorn: a fast HTTP parser, one write per response, and
timeouts that a client cannot hold open.

uvicorn closes an idle kept-alive connection after ``timeout_keep_alive``, but waits for a
request's headers forever (a client that sends a byte now and then holds a connection,
a task and a file descriptor as long as it likes). The protocols below add that deadline;
the body's is the app's (``service.api.guards``: 408).

:class:`HeaderTimeoutHttpToolsProtocol` is the one ``serve`` uses: uvicorn's protocol on
``httptools`` (llhttp, in C), measured about 1.15x the cached requests per second of the
pure-Python h11 parser on this 2-core machine (``bench/service_load.py``). It also hands
the socket one write per response: uvicorn writes a response's headers and its body
separately, two ``send`` calls for the usual small JSON answer; the writes of one pass of
the event loop are joined and written at its end. :class:`HeaderTimeoutH11Protocol` stays
for a Python without ``httptools`` (a platform without its wheel).

Both also refuse a request head past ``Settings.max_header_bytes`` or
``Settings.max_headers`` with a 431 while it arrives (``_header_limits``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from service.commands._header_limits import H11HeadLimits, HttpToolsHeadLimits
from service.core.config import Settings, get_settings

#: Seconds a client has to send a request's headers, from connecting or from the end of
#: the previous response.
HEADER_TIMEOUT_S = 10.0
#: Seconds an idle kept-alive connection stays open.
KEEP_ALIVE_S = 5


class _HeaderDeadline:
    """A timer that closes the connection unless the request's headers arrive in time."""

    def __init__(self, loop: asyncio.AbstractEventLoop, transport: asyncio.Transport,
                 seconds: float) -> None:
        self._loop, self._transport, self._seconds = loop, transport, seconds
        self._timer: asyncio.TimerHandle | None = None

    def arm(self) -> None:
        self.disarm()
        self._timer = self._loop.call_later(self._seconds, self._expire)

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        if not self._transport.is_closing():
            self._transport.close()


class _CoalescingTransport:
    """The socket transport, with the writes of one event-loop pass joined into one.

    Everything but ``write`` goes to the real transport; a write is buffered and the
    buffer flushed at the end of the pass (``call_soon``), or at once before the
    connection closes or when the caller asks for the buffer size (flow control).
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport, self._loop = transport, loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def flush(self) -> None:
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def get_write_buffer_size(self) -> int:
        self.flush()
        return self._transport.get_write_buffer_size()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class HeaderTimeoutH11Protocol(H11HeadLimits, H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request's headers and limits on
    their size."""

    header_timeout_s = HEADER_TIMEOUT_S
    _deadline: _HeaderDeadline | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline = _HeaderDeadline(self.loop, transport, self.header_timeout_s)
        self._deadline.arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE and self._deadline is not None:
            self._deadline.disarm()  # the headers are in

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state is h11.IDLE and self._deadline is not None:
            self._deadline.arm()  # waiting for the next request's headers

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.disarm()
        super().connection_lost(exc)


def _httptools_protocol() -> type | None:
    """uvicorn's httptools protocol with the header deadline and coalesced writes, or
    None without ``httptools``."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        return None

    class HeaderTimeoutHttpToolsProtocol(HttpToolsHeadLimits, HttpToolsProtocol):
        """uvicorn's httptools protocol, one write per response, a header deadline,
        limits on the headers' size."""

        header_timeout_s = HEADER_TIMEOUT_S
        _deadline: _HeaderDeadline | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            coalescing = _CoalescingTransport(transport, self.loop)
            super().connection_made(coalescing)  # type: ignore[arg-type]
            self._deadline = _HeaderDeadline(self.loop, transport, self.header_timeout_s)
            self._deadline.arm()

        def on_headers_complete(self) -> None:
            if self._deadline is not None:
                self._deadline.disarm()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.pipeline and self._deadline is not None:
                self._deadline.arm()  # waiting for the next request's headers

        def connection_lost(self, exc: Exception | None) -> None:
            if self._deadline is not None:
                self._deadline.disarm()
            super().connection_lost(exc)

    return HeaderTimeoutHttpToolsProtocol


#: The protocol ``serve`` runs: httptools where it is installed, else h11.
HeaderTimeoutProtocol: type = _httptools_protocol() or HeaderTimeoutH11Protocol


def uvicorn_options(settings: Settings | None = None) -> dict[str, Any]:
    """Keyword arguments of ``uvicorn.run`` beside the app, host, port and log level: the
    protocol with the header limits of ``settings`` (default: the environment's)."""
    settings = settings or get_settings()
    limits = {"max_header_bytes": settings.max_header_bytes,
              "max_headers": settings.max_headers}
    protocol = type(HeaderTimeoutProtocol.__name__, (HeaderTimeoutProtocol,), limits)
    return {"http": protocol, "timeout_keep_alive": KEEP_ALIVE_S}
