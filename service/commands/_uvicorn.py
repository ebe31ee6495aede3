"""How ``pipetune serve`` runs uvicorn: timeouts that a client cannot hold open.

uvicorn closes an idle kept-alive connection after ``timeout_keep_alive``, but waits for a
request's headers forever (a client that sends a byte now and then holds a connection,
a task and a file descriptor as long as it likes). :class:`HeaderTimeoutH11Protocol` adds
that deadline; the body's is the app's (``service.api.guards``: 408).
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

#: Seconds a client has to send a request's headers, from connecting or from the end of
#: the previous response.
HEADER_TIMEOUT_S = 10.0
#: Seconds an idle kept-alive connection stays open.
KEEP_ALIVE_S = 5


class HeaderTimeoutH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request's headers."""

    header_timeout_s = HEADER_TIMEOUT_S
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the headers are in
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state is h11.IDLE:  # waiting for the next request's headers
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.header_timeout_s, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


def uvicorn_options() -> dict[str, Any]:
    """Keyword arguments of ``uvicorn.run`` beside the app, host, port and log level."""
    return {"http": HeaderTimeoutH11Protocol, "timeout_keep_alive": KEEP_ALIVE_S}
