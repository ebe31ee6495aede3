"""The cost model: the paper's intra-SM list scheduler plus a global wave/L2 model."""

from scheduler_search.cost_model.calibration import (
    Calibration,
    Sample,
    fit_calibration,
    spearman,
)
from scheduler_search.cost_model.estimate import Estimate, estimate, lower_bound_us
from scheduler_search.cost_model.simulate import TimelineEntry
from scheduler_search.cost_model.timings import AnalyticTimings, MeasuredTimings, TimingModel, Work

__all__ = [
    "AnalyticTimings",
    "Calibration",
    "Estimate",
    "MeasuredTimings",
    "Sample",
    "TimelineEntry",
    "TimingModel",
    "Work",
    "estimate",
    "fit_calibration",
    "lower_bound_us",
    "spearman",
]
