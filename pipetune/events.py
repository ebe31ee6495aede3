"""Server-sent events of a run (``GET /v1/runs/{id}/events``), parsed line by line."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Event:
    """One event: ``status``, ``progress``, ``trial``, ``end`` (the finished run) or
    ``error``; ``data`` is its decoded JSON."""

    name: str
    data: Any


class EventParser:
    """Feeds lines of an event stream; :meth:`feed` returns an event at each blank line."""

    def __init__(self) -> None:
        self._name = "message"
        self._data: list[str] = []

    def feed(self, line: str) -> Event | None:
        line = line.rstrip("\r\n")
        if not line:
            if not self._data:
                return None
            event = Event(self._name, json.loads("\n".join(self._data)))
            self._name, self._data = "message", []
            return event
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            self._name = value
        elif field == "data":
            self._data.append(value)
        return None  # "id", comments (":keep-alive") and unknown fields are skipped
