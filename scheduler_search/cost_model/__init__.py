"""The cost model: the paper's intra-SM list scheduler plus a global wave/L2 model."""

from scheduler_search.cost_model.estimate import Estimate, estimate, lower_bound_us
from scheduler_search.cost_model.simulate import TimelineEntry
from scheduler_search.cost_model.timings import AnalyticTimings, MeasuredTimings, TimingModel, Work

__all__ = [
    "AnalyticTimings",
    "Estimate",
    "MeasuredTimings",
    "TimelineEntry",
    "TimingModel",
    "Work",
    "estimate",
    "lower_bound_us",
]
