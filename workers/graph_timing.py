"""Timing short kernels the way inference runs them: many launches replayed from a CUDA graph.

A per-launch sample (flush the L2, event, launch, event) costs the H200 ~18-20 us whatever
the kernel, so a 10 us kernel and a 20 us one read alike. A decode step instead replays a
CUDA graph whose kernels read weights that do not fit in the L2. This method does the same:
it captures ``launches`` launches into one graph, cycling through ``copies`` copies of the
operands whose bytes together exceed twice the L2 (each launch reads its operands from HBM,
the copy it reads was last touched ``copies - 1`` launches before), replays the graph between
two events and divides by the launches. Each sample is one replay; the replay is long
enough (``TimingConfig.replay_us``) that the events' own cost is lost in it.

The capture runs through PyTorch's graphs when PyTorch is loaded (a peer through PyTorch
allocates its results inside the capture, which its graph pool serves), else through
CuPy's stream capture; the generated kernels launch on the capturing stream either way.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from workers.protocol import TimingConfig
from workers.timing import collect_samples

#: Most operand copies a workload keeps for this method (tiny operands would otherwise
#: want thousands; past this they are read from the L2, as a model's tiny layers are).
MAX_COPIES = 256
#: Most launches one graph holds.
_MAX_LAUNCHES = 4096


def copies_for_cold_l2(bytes_per_copy: int, l2_bytes: int) -> int:
    """Operand copies whose bytes together exceed twice the L2 (at least two)."""
    wanted = -(-2 * l2_bytes // max(1, bytes_per_copy)) + 1
    return max(2, min(MAX_COPIES, wanted))


def time_graph_replays(launches: Sequence[Callable[[], Any]], config: TimingConfig) -> list[float]:
    """Per-launch latencies in microseconds: each sample is a graph replay of launches
    cycling through ``launches`` (one per operand copy), divided by its launch count."""
    with _capture_stream() as (stream, capture):
        for launch in launches:  # first launches outside a capture: lazy initialisation
            launch()
        stream.synchronize()
        one_cycle = capture(_cycle(launches, len(launches)))
        per_launch_us = _replay_us(one_cycle, stream) / len(launches)
        cycles = max(1, math.ceil(config.replay_us / (per_launch_us * len(launches))))
        count = min(_MAX_LAUNCHES, len(launches) * cycles)
        replay = one_cycle if count == len(launches) else capture(_cycle(launches, count))
        for _ in range(max(1, config.warmup_launches)):
            replay()
        stream.synchronize()
        return collect_samples(replay, config, stream=stream, launches_per_run=count)


def _cycle(launches: Sequence[Callable[[], Any]], count: int) -> Callable[[], None]:
    def body() -> None:
        for i in range(count):
            launches[i % len(launches)]()

    return body


def _replay_us(replay: Callable[[], None], stream: Any) -> float:
    """The time of one replay after two untimed ones (the first uploads the graph)."""
    import cupy

    replay()
    replay()
    begin, end = cupy.cuda.Event(), cupy.cuda.Event()
    begin.record(stream)
    replay()
    end.record(stream)
    end.synchronize()
    return cupy.cuda.get_elapsed_time(begin, end) * 1e3


Capture = Callable[[Callable[[], None]], Callable[[], None]]


@contextmanager
def _capture_stream() -> Iterator[tuple[Any, Capture]]:
    """A CuPy stream that CuPy (and PyTorch, when loaded) launch on, and a function that
    captures a body into a graph and returns its replay on that stream."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        with _torch_capture(torch) as pair:
            yield pair
    else:
        with _cupy_capture() as pair:
            yield pair


@contextmanager
def _torch_capture(torch: Any) -> Iterator[tuple[Any, Capture]]:
    import cupy

    torch_stream = torch.cuda.Stream()
    torch_stream.wait_stream(torch.cuda.current_stream())
    stream = cupy.cuda.ExternalStream(torch_stream.cuda_stream)
    graphs: list[Any] = []  # kept alive while their replays may run

    def capture(body: Callable[[], None]) -> Callable[[], None]:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=torch_stream):
            body()
        graphs.append(graph)
        return graph.replay

    with torch.cuda.stream(torch_stream), stream:
        yield stream, capture
    torch_stream.synchronize()


@contextmanager
def _cupy_capture() -> Iterator[tuple[Any, Capture]]:
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    graphs: list[Any] = []

    def capture(body: Callable[[], None]) -> Callable[[], None]:
        stream.begin_capture()
        try:
            body()
        finally:
            graph = stream.end_capture()
        graphs.append(graph)
        return lambda: graph.launch(stream)

    with stream:
        yield stream, capture
    stream.synchronize()
