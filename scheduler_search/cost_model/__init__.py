"""The cost model: the paper's intra-SM list scheduler plus a global wave/L2 model."""

from scheduler_search.cost_model.calibration import (
    Calibration,
    Sample,
    fit_calibration,
    spearman,
)
from scheduler_search.cost_model.estimate import Estimate, estimate, lower_bound_us
from scheduler_search.cost_model.shipped import shipped_calibration
from scheduler_search.cost_model.simulate import TimelineEntry
from scheduler_search.cost_model.suite_fit import fit_to_suite
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
    "fit_to_suite",
    "lower_bound_us",
    "shipped_calibration",
    "spearman",
]
