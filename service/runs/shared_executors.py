"""The executors of in-process tunes, kept from one tune to the next.

A GPU pool takes seconds to start and to stop: its worker imports CuPy and makes its CUDA
context, the compiler's processes start, and the worker imports PyTorch when the run's
finalists are timed against the peer. A server keeps its pool for its life; a script that
tunes a model's layers one after the other (``pipetune.tune`` in a loop) paid all of it
on every call. In-process tunes now share one :class:`ExecutorRegistry` per executor
configuration, as a server's runs do. It is closed at the process's exit, and ``idle_s``
after the last tune using it ends (the next tune starts a new one), so that a script that
tuned once and then trains does not keep a worker's GPU memory.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from service.runs.executors import ExecutorRegistry


@dataclass
class _Entry:
    registry: ExecutorRegistry
    users: int = 0
    timer: threading.Timer | None = field(default=None, repr=False)


class SharedExecutors:
    """Registries by configuration key, lent to tunes and closed once idle.

    Args:
        idle_s: seconds a registry no tune uses stays open (0: closed at once).
    """

    def __init__(self, idle_s: float) -> None:
        self.idle_s = idle_s
        self._entries: dict[Hashable, _Entry] = {}
        self._lock = threading.Lock()

    @contextmanager
    def lend(self, key: Hashable, make: Callable[[], ExecutorRegistry]
             ) -> Iterator[ExecutorRegistry]:
        """The registry of ``key`` for the duration of one tune (``make`` builds it where
        none is open)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry(make())
            if entry.timer is not None:
                entry.timer.cancel()
                entry.timer = None
            entry.users += 1
        interrupted = True
        try:
            yield entry.registry
            interrupted = False
        except Exception:
            interrupted = False  # the tune's own error: its workers are fine
            raise
        finally:
            self._give_back(key, entry, interrupted)

    def _give_back(self, key: Hashable, entry: _Entry, interrupted: bool) -> None:
        """The tune is over; a registry no tune uses waits ``idle_s``, or is closed now
        if the tune was interrupted (Ctrl-C mid-measurement: a worker may still be busy
        with a kernel no one waits for)."""
        with self._lock:
            entry.users -= 1
            if entry.users or self._entries.get(key) is not entry:
                return
            if self.idle_s <= 0 or interrupted:
                del self._entries[key]
            else:
                entry.timer = threading.Timer(self.idle_s, self._close_if_idle, (key, entry))
                entry.timer.daemon = True
                entry.timer.start()
                return
        entry.registry.close()

    def _close_if_idle(self, key: Hashable, entry: _Entry) -> None:
        with self._lock:
            if entry.users or self._entries.get(key) is not entry:
                return
            del self._entries[key]
        entry.registry.close()

    def open_keys(self) -> list[Hashable]:
        """Keys whose registry is open now."""
        with self._lock:
            return list(self._entries)

    def close_all(self) -> None:
        """Close every registry (at the process's exit; tunes still running keep theirs
        until they end, then find none)."""
        with self._lock:
            entries, self._entries = list(self._entries.values()), {}
        for entry in entries:
            if entry.timer is not None:
                entry.timer.cancel()
            entry.registry.close()


def _key(settings: Any) -> tuple[Any, ...]:
    """What an in-process registry is made from (``ExecutorRegistry.from_settings``)."""
    return (str(settings.data_dir), settings.simulated_capacity, settings.gpu_batch_size,
            settings.executor, settings.ray_address)


#: This process's registries of in-process tunes.
_shared = SharedExecutors(idle_s=60.0)
atexit.register(_shared.close_all)


@contextmanager
def in_process_executors(settings: Any, gpu_pool_factory: Any = None
                         ) -> Iterator[ExecutorRegistry]:
    """The executors of one in-process tune: the process's shared registry for
    ``settings`` (see the module docstring), or, with ``gpu_pool_factory`` (tests' stand-in
    GPUs), a registry of its own closed when the tune ends."""
    if gpu_pool_factory is not None:
        registry = ExecutorRegistry.from_settings(settings, gpu_pool_factory)
        try:
            yield registry
        finally:
            registry.close()
        return
    _shared.idle_s = settings.local_pool_idle_s
    with _shared.lend(_key(settings), lambda: ExecutorRegistry.from_settings(settings)) as registry:
        yield registry


__all__ = ["SharedExecutors", "in_process_executors"]
