"""Calibration of the cost model from GPU measurements, per device (and operator).

The analytic model's sEU rates are datasheet figures and estimates; measured kernels say
how far off they are. A :class:`Calibration` holds one multiplier per sEU kind on the busy
time of every sTask that sEU runs (``MeasuredTimings.unit_scale``), one on the DRAM time,
and one on the whole prediction (the model's absolute level: it does not change a
ranking, it makes ``predicted_us`` comparable with measurements). Two more terms apply to
compute-bound kernels only, for what a power-capped GPU does: the longer a kernel keeps
the tensor cores busy the lower its clock (``power_slowdown``, reached half-way after
``power_time_us``), and some data types draw less power than others (``dtype_scale``).

:func:`fit_calibration` chooses them from (sProgram, measured latency) pairs by coordinate
descent over a multiplicative grid, minimising the spread of the log residuals
``log(measured) - log(predicted)`` (their mean becomes the overall multiplier), with a
small pull towards 1 so that a few samples cannot swing a rate far. The service fits one
after each GPU run, merges it into the stored one (weighted by sample counts) and ranks
the next runs' candidates with it.

Honest limits: this fits a handful of rates, not the model's structure; where the model
scores many schedules alike (they differ only in what it does not simulate), no rate
separates them and measurement has to.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from scheduler_search.cost_model.estimate import estimate
from scheduler_search.cost_model.timings import MeasuredTimings
from scheduler_search.hardware.model import Device, UnitKind
from scheduler_search.ops import OperatorSpec
from scheduler_search.sprogram import SProgram

#: Multipliers tried around the current value of a scale in each descent step.
STEP_FACTORS = (0.5, 0.7, 0.85, 0.93, 1.0, 1.08, 1.18, 1.4, 2.0)
#: Scales stay within [1/MAX_SCALE, MAX_SCALE].
MAX_SCALE = 8.0
#: Weight of the pull towards 1 (per scale, on its squared log), against the mean squared
#: log residual.
RIDGE = 0.002
#: Below this many samples a fit is not attempted.
MIN_SAMPLES = 4
DRAM = "dram"


@dataclass(frozen=True)
class Sample:
    """One measured kernel: its sProgram, workload and median latency."""

    sprogram: SProgram
    spec: OperatorSpec
    latency_us: float


@dataclass(frozen=True)
class Calibration:
    """Per-device corrections of the cost model.

    Attributes:
        unit_scale: sEU kind (``UnitKind`` value) -> multiplier of its sTasks' busy time.
        dram_scale: multiplier of the DRAM time (1 / the bandwidth's correction).
        latency_scale: multiplier of the final prediction.
        dtype_scale: data type -> multiplier of a compute-bound kernel's prediction.
        power_slowdown: a compute-bound kernel of model time ``t`` (after the scales
            above) takes ``1 + power_slowdown * t / (t + power_time_us)`` times longer:
            the sustained clock of a long kernel under the power cap.
        power_time_us: the model time at which half that slowdown is reached.
        samples: measurements behind it (merged fits add up).
        log_rmse_before, log_rmse_after: RMS of the log residuals of the last fit's
            samples with the uncalibrated model (after the best overall multiplier alone)
            and with this calibration: how much the rates explain.
    """

    unit_scale: dict[str, float] = field(default_factory=dict)
    dram_scale: float = 1.0
    latency_scale: float = 1.0
    dtype_scale: dict[str, float] = field(default_factory=dict)
    power_slowdown: float = 0.0
    power_time_us: float = 1000.0
    samples: int = 0
    log_rmse_before: float | None = None
    log_rmse_after: float | None = None

    @property
    def is_identity(self) -> bool:
        return (
            all(v == 1.0 for v in self.unit_scale.values())
            and self.dram_scale == 1.0
            and self.latency_scale == 1.0
            and all(v == 1.0 for v in self.dtype_scale.values())
            and self.power_slowdown == 0.0
        )

    def timings(self) -> MeasuredTimings:
        return MeasuredTimings(unit_scale={UnitKind(k): v for k, v in self.unit_scale.items()})

    def device(self, device: Device) -> Device:
        """``device`` with its DRAM bandwidth corrected."""
        if self.dram_scale == 1.0:
            return device
        return replace(device, mem_bandwidth_gbps=device.mem_bandwidth_gbps / self.dram_scale)

    def predict_us(self, sprogram: SProgram, spec: OperatorSpec, device: Device) -> float:
        """The calibrated prediction of ``sprogram``'s latency in microseconds."""
        result = estimate(sprogram, spec, self.device(device), self.timings())
        return self.scaled_us(result.latency_us, result.bound, spec)

    def scaled_us(self, model_us: float, bound: str, spec: OperatorSpec) -> float:
        """A (unit- and DRAM-calibrated) model latency with the overall, data type and
        power terms applied."""
        latency_us = model_us * self.latency_scale
        if bound == "compute":
            dtype = getattr(spec, "dtype", "")
            power = 1.0 + self.power_slowdown * model_us / (model_us + self.power_time_us)
            latency_us *= self.dtype_scale.get(dtype, 1.0) * power
        return latency_us

    def to_dict(self) -> dict[str, Any]:
        return {
            "unit_scale": dict(sorted(self.unit_scale.items())),
            "dram_scale": self.dram_scale,
            "latency_scale": self.latency_scale,
            "dtype_scale": dict(sorted(self.dtype_scale.items())),
            "power_slowdown": self.power_slowdown,
            "power_time_us": self.power_time_us,
            "samples": self.samples,
            "log_rmse_before": self.log_rmse_before,
            "log_rmse_after": self.log_rmse_after,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        return cls(
            unit_scale={str(k): float(v) for k, v in data.get("unit_scale", {}).items()},
            dram_scale=float(data.get("dram_scale", 1.0)),
            latency_scale=float(data.get("latency_scale", 1.0)),
            dtype_scale={str(k): float(v) for k, v in data.get("dtype_scale", {}).items()},
            power_slowdown=float(data.get("power_slowdown", 0.0)),
            power_time_us=float(data.get("power_time_us", 1000.0)),
            samples=int(data.get("samples", 0)),
            log_rmse_before=data.get("log_rmse_before"),
            log_rmse_after=data.get("log_rmse_after"),
        )

    def merged(self, newer: Calibration, max_weight: int = 256) -> Calibration:
        """This calibration and a newer fit combined: each scale the sample-weighted
        geometric mean (an old calibration weighs at most ``max_weight`` samples, so the
        device's present keeps a say)."""
        if self.samples <= 0:
            return newer
        if newer.samples <= 0:
            return self
        w_old = min(self.samples, max_weight)
        w_new = newer.samples
        total = w_old + w_new

        def mix(old: float, new: float) -> float:
            return math.exp((w_old * math.log(old) + w_new * math.log(new)) / total)

        units = set(self.unit_scale) | set(newer.unit_scale)
        return Calibration(
            unit_scale={
                u: mix(self.unit_scale.get(u, 1.0), newer.unit_scale.get(u, 1.0)) for u in units
            },
            dram_scale=mix(self.dram_scale, newer.dram_scale),
            latency_scale=mix(self.latency_scale, newer.latency_scale),
            dtype_scale={**self.dtype_scale, **newer.dtype_scale},
            power_slowdown=newer.power_slowdown or self.power_slowdown,
            power_time_us=(newer.power_time_us if newer.power_slowdown
                           else self.power_time_us),
            samples=self.samples + newer.samples,
            log_rmse_before=newer.log_rmse_before,
            log_rmse_after=newer.log_rmse_after,
        )


def _log_rmse(residuals: list[float]) -> tuple[float, float]:
    """(mean, RMS about the mean) of log residuals."""
    mean = sum(residuals) / len(residuals)
    return mean, math.sqrt(sum((r - mean) ** 2 for r in residuals) / len(residuals))


def _clamp(value: float) -> float:
    return min(MAX_SCALE, max(1.0 / MAX_SCALE, value))


def fit_calibration(
    samples: Sequence[Sample],
    device: Device,
    *,
    prior: Calibration | None = None,
    passes: int = 2,
    time_limit_s: float = 10.0,
) -> Calibration | None:
    """Fit a :class:`Calibration` of ``device`` to ``samples`` (None if too few).

    Args:
        samples: measured kernels (non-positive latencies are ignored).
        prior: where the descent starts (the stored calibration); identity by default.
        passes: sweeps over the scales.
        time_limit_s: the descent stops after this long, keeping the best so far.
    """
    samples = [s for s in samples if s.latency_us > 0 and math.isfinite(s.latency_us)]
    if len(samples) < MIN_SAMPLES:
        return None
    started = time.monotonic()
    used = sorted({str(u) for s in samples for u in s.sprogram.mapping.values()})
    start = prior or Calibration()
    scales: dict[str, float] = {u: start.unit_scale.get(u, 1.0) for u in used}
    scales[DRAM] = start.dram_scale
    measured = [math.log(s.latency_us) for s in samples]

    def residuals(trial: dict[str, float]) -> list[float]:
        candidate = Calibration(
            unit_scale={u: v for u, v in trial.items() if u != DRAM}, dram_scale=trial[DRAM]
        )
        return [
            m - math.log(max(candidate.predict_us(s.sprogram, s.spec, device), 1e-9))
            for m, s in zip(measured, samples, strict=True)
        ]

    def loss(trial: dict[str, float]) -> float:
        _, spread = _log_rmse(residuals(trial))
        return spread**2 + RIDGE * sum(math.log(v) ** 2 for v in trial.values())

    _, before = _log_rmse(residuals({u: 1.0 for u in scales}))
    best_loss = loss(scales)
    for _ in range(passes):
        for name in list(scales):
            if time.monotonic() - started > time_limit_s:
                break
            current = scales[name]
            for factor in STEP_FACTORS:
                value = _clamp(current * factor)
                if value == scales[name]:
                    continue
                trial = {**scales, name: value}
                trial_loss = loss(trial)
                if trial_loss < best_loss - 1e-12:
                    best_loss, scales = trial_loss, trial
    mean, after = _log_rmse(residuals(scales))
    return Calibration(
        unit_scale={u: v for u, v in scales.items() if u != DRAM},
        dram_scale=scales[DRAM],
        latency_scale=math.exp(mean),
        samples=len(samples),
        log_rmse_before=before,
        log_rmse_after=after,
    )


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman rank correlation (average ranks for ties); nan below two points."""
    if len(xs) < 2:
        return math.nan

    def ranks(values: Sequence[float]) -> list[float]:
        order = sorted(range(len(values)), key=lambda i: values[i])
        out = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2
            i = j + 1
        return out

    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    vx = math.sqrt(sum((a - mx) ** 2 for a in rx))
    vy = math.sqrt(sum((b - my) ** 2 for b in ry))
    return cov / (vx * vy) if vx and vy else math.nan


__all__ = ["Calibration", "Sample", "fit_calibration", "spearman"]
