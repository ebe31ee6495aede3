"""The response of an event stream: a ``StreamingResponse`` that gives its slot back
(the cap on open streams) however the stream ends: finished, client gone, or shut down."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


class EventStreamResponse(StreamingResponse):
    """``text/event-stream`` of ``events``, unbuffered; ``release`` runs once at the end."""

    def __init__(self, events: AsyncIterator[str], release: Callable[[], None]) -> None:
        super().__init__(events, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()
