"""Named ways to search: a device kind's search knobs and its timing policies.

The service picks a preset by device (``SIMULATED`` without a GPU, ``GPU`` on one) rather
than spelling knobs at its call site, so a benchmark, the CLI and the server search alike.
Timing policies are plain data: the service turns them into the worker's timing config
(this package never imports ``workers``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler_search.search.driver import SearchConfig


@dataclass(frozen=True)
class TimingPolicy:
    """How one measurement is timed on a GPU, and how long it may take before its worker
    is killed (a hung kernel)."""

    warmup_launches: int
    warmup_ms: float
    min_samples: int
    min_time_ms: float
    deadline_s: float


#: A candidate during the search: enough samples to rank, little time (on an H200 a
#: 4096^3 GEMM candidate takes ~10 ms to time this way).
SEARCH_TIMING = TimingPolicy(warmup_launches=3, warmup_ms=0.0, min_samples=20,
                             min_time_ms=0.0, deadline_s=10.0)
#: The finalists and the vendor baseline, in the final interleaved re-timing.
FINAL_TIMING = TimingPolicy(warmup_launches=3, warmup_ms=10.0, min_samples=30,
                            min_time_ms=20.0, deadline_s=30.0)


@dataclass(frozen=True)
class SearchPreset:
    """A named search: the driver's knobs for a kind of device, and its timing policies.

    Attributes:
        name: what logs and results call it.
        knobs: :class:`SearchConfig` fields other than the seed and batch size.
        search_timing: the candidates' timing (``None``: nothing is timed, the cost model
            answers).
        final_timing: the finalists' and the baseline's timing.
    """

    name: str
    knobs: dict[str, Any] = field(default_factory=dict)
    search_timing: TimingPolicy | None = None
    final_timing: TimingPolicy | None = None

    def config(self, seed: int, batch_size: int | None = None) -> SearchConfig:
        """The driver's configuration for one run."""
        return SearchConfig(seed=seed, batch_size=batch_size, **self.knobs)


#: The simulated device: the driver's defaults (every candidate asked of the sampler, the
#: pool ranked by the cost model, which also measures).
SIMULATED = SearchPreset("simulated")
#: A GPU: overlapped rounds as wide as the compiler pool, mixed proposals (asking the
#: sampler for every candidate costs seconds per round on a GEMM space), and more
#: finalists re-timed (the quick timing's selection noise is a few percent).
GPU = SearchPreset(
    "gpu",
    knobs={"overlap": True, "retime_top_k": 5, "proposals": "mixed",
           "sampler_asks_per_slot": 1, "random_per_slot": 2},
    search_timing=SEARCH_TIMING,
    final_timing=FINAL_TIMING,
)
