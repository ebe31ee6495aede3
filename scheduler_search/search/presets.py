"""Named ways to search: a device kind's proposal sources, search knobs and timing policies.

The service picks a preset by device (``SIMULATED`` without a GPU, ``GPU`` on one) rather
than spelling knobs at its call site, so a benchmark, the CLI and the server search alike.
A preset composes proposal sources by name (:mod:`scheduler_search.search.proposals`).
Timing policies are plain data: the service turns them into the worker's timing config
(this package never imports ``workers``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from scheduler_search.search.config import SearchConfig
from scheduler_search.search.records import SOURCE_LOCAL, SOURCE_MODEL, SOURCE_SEARCH

if TYPE_CHECKING:
    from scheduler_search.hardware import Device
    from scheduler_search.ops import OperatorSpec


#: Per-launch samples between CUDA events, the L2 flushed before each (``workers``'
#: ``TimingConfig.method``): kernels long enough that a sample's ~20 us of overhead is lost.
EVENTS = "events"
#: Launches replayed from a CUDA graph over operand copies larger than the L2: kernels so
#: short (or so memory-bound) that a per-launch sample cannot tell them apart, timed the
#: way a model's decode step runs them.
GRAPH = "graph"
#: A workload whose roofline time is under this is timed by :data:`GRAPH` (a decode
#: step's m = 256 rows against a 28672 x 4096 weight: 61 us of tensor-core time, 52 of HBM).
SHORT_US = 100.0
#: ... as is a memory-bound one (HBM time over tensor-core time) under this.
MEMORY_BOUND_US = 500.0


@dataclass(frozen=True)
class TimingPolicy:
    """How one measurement is timed on a GPU, and how long it may take before its worker
    is killed (a hung kernel). ``method`` is :data:`EVENTS` or :data:`GRAPH`; a run sets it
    per workload (:func:`timing_method`), the same for its candidates and its peers."""

    warmup_launches: int
    warmup_ms: float
    min_samples: int
    min_time_ms: float
    deadline_s: float
    method: str = EVENTS

    def for_workload(self, spec: OperatorSpec, device: Device) -> TimingPolicy:
        """This policy with the timing method of ``spec`` on ``device``."""
        return replace(self, method=timing_method(spec, device))


def roofline_us(spec: OperatorSpec, device: Device) -> tuple[float, float]:
    """(HBM time, tensor-core time) in microseconds of ``spec`` at the device's peaks: its
    compulsory traffic over the memory bandwidth, its flops over the 16-bit (or its input
    type's) tensor-core rate."""
    memory_us = spec.min_bytes() / (device.mem_bandwidth_gbps * 1e3)
    rates = device.tensor_flops_per_cycle_per_sm
    dtype = spec.tensors()[0].dtype
    per_cycle = rates.get(dtype, rates.get("float16", max(rates.values(), default=1.0)))
    compute_us = spec.flops() / (per_cycle * device.sm_count * device.clock_mhz)
    return memory_us, compute_us


def timing_method(spec: OperatorSpec, device: Device) -> str:
    """:data:`GRAPH` for a workload that runs short or memory-bound at the roofline,
    :data:`EVENTS` for the rest."""
    memory_us, compute_us = roofline_us(spec, device)
    roofline = max(memory_us, compute_us)
    if roofline < SHORT_US or (memory_us > compute_us and roofline < MEMORY_BOUND_US):
        return GRAPH
    return EVENTS


#: A candidate during the search: enough samples to rank, little time (on an H200 a
#: 4096^3 GEMM candidate takes ~10 ms to time this way).
SEARCH_TIMING = TimingPolicy(warmup_launches=3, warmup_ms=0.0, min_samples=20,
                             min_time_ms=0.0, deadline_s=10.0)
#: The finalists and the vendor baseline, in the final interleaved re-timing.
FINAL_TIMING = TimingPolicy(warmup_launches=3, warmup_ms=10.0, min_samples=30,
                            min_time_ms=20.0, deadline_s=30.0)


@dataclass(frozen=True)
class SearchPreset:
    """A named search: the proposal sources and the driver's knobs for a kind of device,
    and its timing policies.

    Attributes:
        name: what logs and results call it.
        sources: the proposal sources after the seeds, in the order free slots are dealt
            to them (``SearchConfig.sources``).
        knobs: other :class:`SearchConfig` fields than the seed, batch size and sources.
        search_timing: the candidates' timing (``None``: nothing is timed, the cost model
            answers).
        final_timing: the finalists' and the baseline's timing.
    """

    name: str
    sources: tuple[str, ...] = (SOURCE_SEARCH,)
    knobs: dict[str, Any] = field(default_factory=dict)
    search_timing: TimingPolicy | None = None
    final_timing: TimingPolicy | None = None

    def config(self, seed: int, batch_size: int | None = None) -> SearchConfig:
        """The driver's configuration for one run."""
        return SearchConfig(seed=seed, batch_size=batch_size, sources=self.sources,
                            **self.knobs)


#: The simulated device, where the cost model also measures: a slot in turn to the
#: sampler (one ask each: most of a space's points are invalid, and each ask costs
#: milliseconds) and to the cost model's picks of many cheap random valid samples (its
#: ranking is the measurement here, so these find the fast structures at once); the
#: search ends when two rounds in a row measure only latencies already seen.
SIMULATED = SearchPreset(
    "simulated",
    sources=(SOURCE_SEARCH, SOURCE_MODEL),
    knobs={"pool_factor": None, "sampler_asks_per_slot": 1, "random_per_slot": 8,
           "stop_when_tied": 2},
)
#: A GPU: overlapped rounds as wide as the compiler pool; the slots dealt in turns to the
#: neighbours of the best, the sampler (one ask per slot: asking it for every candidate of
#: a pool costs seconds per round on a GEMM space) and the cost model's picks; more
#: finalists re-timed (the quick timing's selection noise is a few percent), and the
#: leaders re-timed as the search goes; a first round of two (the first seeds: a cached
#: neighbour's winner or the hand-written design), so the first result does not wait for
#: a whole round of a large shape (8192x28672x8192: the first result 5.6-6.3 s after the
#: request with rounds of 16, 1.4-2.4 s on the suite's smaller shapes; 2026-12-02).
GPU = SearchPreset(
    "gpu",
    sources=(SOURCE_LOCAL, SOURCE_SEARCH, SOURCE_MODEL),
    knobs={"overlap": True, "retime_top_k": 5, "retime_leaders": 3, "pool_factor": None,
           "sampler_asks_per_slot": 1, "random_per_slot": 2, "first_batch_size": 2},
    search_timing=SEARCH_TIMING,
    final_timing=FINAL_TIMING,
)
