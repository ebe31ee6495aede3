"""The calibration a device ships with: fitted to the tuned kernels of a benchmark suite.

The service refines a device's calibration after each GPU run (``fit_calibration``). A
machine that never ran one, the simulated device above all, starts from the calibration
fitted here to the winners of the project's own benchmark runs (``bench/calibrate.py``
writes it into ``data/calibrations.json``), so that its latencies are comparable with what
the same kernels measure on the GPU.

The fit is a small grid search that minimises the worst relative error over the samples
(a user reads one shape's figure, not an average): the tensor cores' rate, the power terms
and the data-type factors on a grid, and for each grid point the two overall levels
(compute-bound and DRAM-bound kernels) that centre the errors in log space.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler_search.cost_model.calibration import Calibration, Sample
from scheduler_search.cost_model.estimate import estimate
from scheduler_search.hardware.model import Device

#: Grids of the fit (the tensor cores' busy-time scale, the power slowdown and its time,
#: and the factor of a data type other than the reference one).
TENSOR_SCALES = (0.7, 0.8, 0.9, 1.0, 1.1, 1.2)
POWER_SLOWDOWNS = tuple(round(0.025 * i, 3) for i in range(21))
POWER_TIMES_US = (100.0, 200.0, 400.0, 800.0, 1600.0, 3200.0)
DTYPE_FACTORS = (0.9, 0.93, 0.95, 0.97, 1.0, 1.03, 1.05)


@dataclass(frozen=True)
class _Point:
    """One sample under a tensor-core scale: its model time, bound, data type, measurement."""

    model_us: float
    bound: str
    dtype: str
    measured_us: float


def _centre(ratios: Sequence[float]) -> float:
    """The scale that makes the largest over- and under-estimate equal in log space."""
    return math.sqrt(min(ratios) * max(ratios)) if ratios else 1.0


def _points(samples: Sequence[Sample], device: Device, tensor_scale: float) -> list[_Point]:
    timings = Calibration(unit_scale={"tensor_core": tensor_scale}).timings()
    points = []
    for sample in samples:
        result = estimate(sample.sprogram, sample.spec, device, timings)
        dtype = str(getattr(sample.spec, "dtype", ""))
        points.append(_Point(result.latency_us, result.bound, dtype, sample.latency_us))
    return points


def _compute_fit(
    points: list[_Point], slowdown: float, time_us: float, factors: dict[str, float]
) -> tuple[float, float]:
    """(worst log error, overall level) of the compute-bound points under these terms."""
    modelled = [
        (p.model_us * (1 + slowdown * p.model_us / (p.model_us + time_us))
         * factors.get(p.dtype, 1.0), p.measured_us)
        for p in points
    ]
    level = _centre([m / t for t, m in modelled])
    worst = max((abs(math.log(level * t / m)) for t, m in modelled), default=0.0)
    return worst, level


def fit_to_suite(samples: Sequence[Sample], device: Device) -> Calibration:
    """The calibration of ``device`` whose worst relative error over ``samples`` (tuned
    kernels and their measured latencies) is smallest on the grid."""
    if not samples:
        raise ValueError("no samples to fit")
    dtypes = sorted({str(getattr(s.spec, "dtype", "")) for s in samples})
    others = dtypes[1:]  # the first data type is the reference (factor 1)
    best: tuple[float, Calibration] | None = None
    for tensor_scale in TENSOR_SCALES:
        points = _points(samples, device, tensor_scale)
        compute = [p for p in points if p.bound == "compute"]
        dram_level = _centre([p.measured_us / p.model_us for p in points if p.bound != "compute"])
        dram_worst = max((abs(math.log(dram_level * p.model_us / p.measured_us))
                          for p in points if p.bound != "compute"), default=0.0)
        for slowdown, time_us, *factor_values in itertools.product(
            POWER_SLOWDOWNS, POWER_TIMES_US, *([DTYPE_FACTORS] * len(others))
        ):
            factors = dict(zip(others, factor_values, strict=True))
            worst, level = _compute_fit(compute, slowdown, time_us, factors)
            worst = max(worst, dram_worst)
            if best is None or worst < best[0] - 1e-12:
                best = (worst, Calibration(
                    unit_scale={"tensor_core": tensor_scale},
                    dram_scale=dram_level / level,
                    latency_scale=level,
                    dtype_scale=factors,
                    power_slowdown=slowdown,
                    power_time_us=time_us,
                    samples=len(samples),
                ))
    assert best is not None
    return best[1]


__all__ = ["fit_to_suite"]
