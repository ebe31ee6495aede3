"""A pretend GPU for the service's GPU path on a machine without one.

- :class:`FakeProbe`: says one H200 is visible (properties as CuPy reports them on the
  lent H200, and a fingerprint).
- :class:`ModelGpu`: an Executor that "measures" kernel artifacts with a known truth:
  the cost model with the tensor cores :data:`TRUE_TENSOR_SCALE` times slower than the
  analytic model thinks, times :data:`TRUE_LEVEL` (so a calibration has something to
  find), and each peer baseline (cuBLAS; cuDNN SDPA and FlashAttention-2; mamba_ssm's
  Triton chunk scan) at a fixed latency (:data:`BASELINE_US`); the baselines named in
  ``failing_baselines`` fail as an unavailable one does in a real worker. It records what
  it was given, when.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Sequence
from typing import Any

from scheduler_search.cost_model import MeasuredTimings, estimate
from scheduler_search.hardware import device_from_properties
from scheduler_search.hardware.model import UnitKind
from scheduler_search.ops import parse_spec
from scheduler_search.sprogram import plan_sprogram
from workers import Executor, Job, Measurement, MeasurementStatus
from workers.testing import H200_PROPS

FINGERPRINT: dict[str, Any] = {
    "name": "NVIDIA H200",
    "compute_capability": "9.0",
    "sm_count": 132,
    "total_memory_bytes": 150754820096,
    "l2_bytes": 62914560,
    "driver_version": "13.0",
    "driver_release": "580.159.04",
    "cuda_runtime_version": "13.2",
    "cupy_version": "14.2.0",
    "codegen_version": "gemm-1",
}
TRUE_TENSOR_SCALE = 1.3
TRUE_LEVEL = 1.5
CUBLAS_US = 200.0
SDPA_CUDNN_US = 900.0
SDPA_FLASH_US = 1100.0
MAMBA_SSM_CHUNK_SCAN_US = 150.0
#: The pretend GPU's latency of each peer baseline, by ``workers.baselines`` name.
BASELINE_US = {"cublas": CUBLAS_US, "sdpa_cudnn": SDPA_CUDNN_US, "sdpa_flash": SDPA_FLASH_US,
               "mamba_ssm_chunk_scan": MAMBA_SSM_CHUNK_SCAN_US}


class FakeProbe:
    """``count`` GPUs, all the lent H200."""

    def __init__(self, count: int = 1) -> None:
        self._count = count

    def count(self) -> int:
        return self._count

    def properties(self, index: int) -> dict[str, Any]:
        return dict(H200_PROPS)

    def fingerprint(self, index: int) -> dict[str, Any]:
        return dict(FINGERPRINT)


def true_latency_us(job: Job) -> float:
    """The pretend GPU's latency of a kernel job (see the module docstring)."""
    artifact = job.artifact
    assert artifact is not None
    spec = parse_spec(artifact.op, artifact.params)
    device = device_from_properties(H200_PROPS)
    sprogram = plan_sprogram(spec, device, artifact.extra["choices"])
    timings = MeasuredTimings(unit_scale={UnitKind.TENSOR_CORE: TRUE_TENSOR_SCALE})
    return estimate(sprogram, spec, device, timings).latency_us * TRUE_LEVEL


class ModelGpu(Executor):
    """Measures kernel and baseline jobs with a known truth; records its calls."""

    def __init__(
        self, batch: int = 4, measure_s: float = 0.0, failing_baselines: Collection[str] = ()
    ) -> None:
        self.batch = batch
        self.measure_s = measure_s
        self.failing_baselines = set(failing_baselines)
        self.batches: list[list[Job]] = []
        self.prepared: list[list[Job]] = []
        self.events: list[tuple[str, int, float]] = []  # (what, batch index, time)
        self.closed = False
        self._lock = threading.Lock()

    def capacity(self) -> int:
        return 1

    def batch_size(self) -> int:
        return self.batch

    def prepare(self, jobs: Sequence[Job]) -> None:
        self.prepared.append(list(jobs))
        self.events.append(("prepare", len(self.prepared) - 1, time.monotonic()))

    def measure(self, jobs: Sequence[Job]) -> list[Measurement]:
        with self._lock:
            index = len(self.batches)
            self.batches.append(list(jobs))
            self.events.append(("measure_start", index, time.monotonic()))
            if self.measure_s:
                time.sleep(self.measure_s)
            results = [self._one(job) for job in jobs]
            self.events.append(("measure_end", index, time.monotonic()))
            return results

    def _one(self, job: Job) -> Measurement:
        if job.baseline is not None:
            latency = BASELINE_US.get(job.baseline)
            if latency is None or job.baseline in self.failing_baselines:
                # What a worker answers when the baseline is unavailable (BaselineUnavailable).
                return Measurement(MeasurementStatus.LAUNCH_ERROR,
                                   error=f"{job.baseline}: not importable here")
            return Measurement.from_samples([latency], rel_error=1e-3, error_bound=1e-2)
        if job.artifact is None:
            return Measurement(MeasurementStatus.LAUNCH_ERROR, error="not a kernel")
        return Measurement.from_samples([true_latency_us(job)], rel_error=1e-3, error_bound=1e-2)

    @property
    def kernel_jobs(self) -> list[Job]:
        return [j for batch in self.batches for j in batch if j.artifact is not None]

    def baseline_jobs(self, name: str) -> list[Job]:
        """Every job of the baseline ``name`` it was given, in order."""
        return [j for batch in self.batches for j in batch if j.baseline == name]

    def close(self) -> None:
        self.closed = True
