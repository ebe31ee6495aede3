"""SimulatedDevice: an Executor that measures with the cost model instead of a GPU.

It is what lets the whole service (search, database, API, dashboard) run and be tested on
a machine without a GPU, in the spirit of Kernel Tuner's simulation runner. A job carries
an sProgram (``Job.schedule``, its ``to_dict()``); the "measurement" is the cost model's
latency estimate for it on the simulated device model (calibrated on that GPU's
measurements where pipetune ships a calibration), and every result is flagged
``simulated=True`` so that nothing downstream can mistake it for a GPU timing.

This is the one executor that reaches into ``scheduler_search``: the simulated device *is*
the cost model. It does so lazily, in the default estimator, so ``workers`` still imports
without it; a caller may inject any other estimator.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from typing import Any

from workers.executors.base import Executor
from workers.protocol import Job, Measurement, MeasurementStatus

#: ``estimator(schedule, workload, device) -> latency_us``; raises for a schedule it
#: cannot time (the job then becomes a ``launch_error``).
Estimator = Callable[[dict[str, Any], dict[str, Any], Any], float]

DEFAULT_CAPACITY = 8


def cost_model_estimator(schedule: dict[str, Any], workload: dict[str, Any], device: Any) -> float:
    """The cost model's latency (microseconds) for an sProgram dict, calibrated by the
    calibration pipetune ships for the device and operator where it has one (fitted on
    the same kernels measured on that GPU), else the analytic model's.

    ``device`` is a catalog name (``"sim:h200"``) or a ``scheduler_search`` Device.
    """
    from scheduler_search.cost_model import estimate, shipped_calibration
    from scheduler_search.hardware import get_device
    from scheduler_search.ops import parse_spec
    from scheduler_search.sprogram import SProgram

    spec = parse_spec(workload["op"], workload["params"])
    model = get_device(device) if isinstance(device, str) else device
    sprogram = SProgram.from_dict(schedule)
    calibration = shipped_calibration(model.name, spec.op)
    if calibration is not None:
        return float(calibration.predict_us(sprogram, spec, model))
    return float(estimate(sprogram, spec, model).latency_us)


class SimulatedDevice(Executor):
    """Measures sProgram jobs with the cost model; deterministic unless ``noise`` is set.

    Args:
        device: the device it simulates: a catalog name (``"sim:h200"``, ``"h100"``) or a
            ``scheduler_search`` Device (a live GPU's model), passed to the estimator.
        capacity: how many candidates one batch may hold (the search asks for batches
            this wide); a real pool's width is its GPU count.
        noise: relative standard deviation of a multiplicative Gaussian noise on each
            latency (0: none, the default), to exercise re-timing and drift handling.
        seed: seeds the noise.
        estimator: latency of one job; the cost model by default.

    Example:
        with SimulatedDevice("sim:h200") as device:
            [result] = device.measure([Job(workload, schedule=sprogram.to_dict())])
            assert result.simulated
    """

    def __init__(
        self,
        device: Any = "sim:h200",
        *,
        capacity: int = DEFAULT_CAPACITY,
        noise: float = 0.0,
        seed: int = 0,
        estimator: Estimator | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        if noise < 0:
            raise ValueError("noise must be >= 0")
        self.device = device
        self._capacity = capacity
        self._noise = noise
        self._rng = random.Random(seed)
        self._estimator = estimator or cost_model_estimator
        self._lock = threading.Lock()

    def capacity(self) -> int:
        return self._capacity

    def measure(self, jobs: Sequence[Job]) -> list[Measurement]:
        with self._lock:
            return [self._measure(job) for job in jobs]

    def _measure(self, job: Job) -> Measurement:
        if job.schedule is None:
            what = "a kernel artifact" if job.artifact is not None else "a baseline"
            return Measurement(
                MeasurementStatus.LAUNCH_ERROR,
                error=f"the simulated device measures schedules, not {what}",
                simulated=True,
            )
        try:
            latency_us = self._estimator(job.schedule, job.workload, self.device)
        except Exception as exc:  # a schedule the cost model cannot time is a status
            return Measurement(
                MeasurementStatus.LAUNCH_ERROR,
                error=f"cost model: {type(exc).__name__}: {exc}",
                simulated=True,
            )
        if self._noise:
            latency_us *= max(0.05, self._rng.gauss(1.0, self._noise))
        return Measurement.from_samples([latency_us], simulated=True)
