"""Kernel timing with CUDA events: warm-up, L2 flush between launches, median of samples.

The GPU is kept ahead of the host: before each sample's begin event a spin kernel holds
the stream for ``host_lead_us``, while the host enqueues the begin event, the launch and
the end event behind it, so the time between the events is the kernel's own.

Each sample is one launch bracketed by two events on the current stream, preceded by a
write over a buffer at least twice the L2 size, so every launch starts with a cold L2
(inputs that fit in L2 would otherwise be timed from cache). Samples are taken in chunks
and synchronised once per chunk, so the host never waits between launches of a chunk.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from workers.protocol import TimingConfig

_CHUNK = 10
_MIN_FLUSH_BYTES = 64 << 20


class L2Flusher:
    """Owns a device buffer of ``max(2 * l2_bytes, 64 MiB)`` and overwrites it on call."""

    def __init__(self, l2_bytes: int) -> None:
        import cupy

        self.nbytes = max(2 * int(l2_bytes), _MIN_FLUSH_BYTES)
        self._buffer = cupy.empty(self.nbytes, dtype=cupy.uint8)

    def __call__(self) -> None:
        self._buffer.data.memset_async(0, self.nbytes)


_SPIN_SOURCE = r"""
extern "C" __global__ void pipetune_spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}
"""


class HostLead:
    """A one-thread kernel that keeps the stream busy for a given time."""

    def __init__(self, lead_us: float) -> None:
        import cupy

        clock_khz = cupy.cuda.Device().attributes["ClockRate"]
        self.cycles = int(lead_us * clock_khz / 1e3)
        self._kernel = cupy.RawKernel(_SPIN_SOURCE, "pipetune_spin")

    def __call__(self) -> None:
        import numpy as np

        self._kernel((1,), (1,), (np.int64(self.cycles),))


def time_launches(
    launch: Callable[[], Any], config: TimingConfig, flush: Callable[[], None] | None
) -> list[float]:
    """Per-launch latencies in microseconds of ``launch()`` (which must only enqueue work)."""
    import cupy

    device = cupy.cuda.Device()
    warm_start = time.perf_counter()
    launches = 0
    while launches < config.warmup_launches or _ms_since(warm_start) < config.warmup_ms:
        launch()
        device.synchronize()
        launches += 1

    if not config.flush_l2:
        flush = None
    return collect_samples(launch, config, before=flush)


def collect_samples(run: Callable[[], Any], config: TimingConfig, *,
                    before: Callable[[], None] | None = None, stream: Any = None,
                    launches_per_run: int = 1) -> list[float]:
    """Samples in microseconds per launch: ``before()`` (an L2 flush), the host lead,
    then ``run()`` between two events on ``stream`` (the current one by default), divided
    by its ``launches_per_run``; taken in chunks synchronised once each, until ``config``'s
    counts and wall time are reached."""
    import cupy

    lead = HostLead(config.host_lead_us) if config.host_lead_us > 0 else None
    events = [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(_CHUNK)]
    samples: list[float] = []
    start = time.perf_counter()
    while True:
        for begin, end in events:
            if before is not None:
                before()
            if lead is not None:
                lead()
            begin.record(stream)
            run()
            end.record(stream)
        events[-1][1].synchronize()
        samples.extend(cupy.cuda.get_elapsed_time(b, e) * 1e3 / launches_per_run
                       for b, e in events)
        if len(samples) >= config.max_samples:
            return samples[: config.max_samples]
        if len(samples) >= config.min_samples and _ms_since(start) >= config.min_time_ms:
            return samples


def _ms_since(start: float) -> float:
    return (time.perf_counter() - start) * 1e3
