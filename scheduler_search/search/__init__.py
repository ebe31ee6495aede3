"""The search driver: Optuna over a schedule space, batches measured by an executor."""

from scheduler_search.search.driver import (
    CODEGEN_ERROR,
    INVALID,
    PRIORITY_SOURCES,
    SOURCE_COST_MODEL,
    SOURCE_DESIGN,
    SOURCE_LOCAL,
    SOURCE_MODEL,
    SOURCE_SEARCH,
    SOURCE_WARM_START,
    ExecutorLike,
    MeasurementLike,
    Progress,
    SearchConfig,
    SearchDriver,
    SearchResult,
    TrialRecord,
    neighbours,
)
from scheduler_search.search.seeding import cost_model_seeds, structure_of
from scheduler_search.search.stopping import Budget, Stopper, StopReason
from scheduler_search.search.warm_start import CachedSchedule, fit_to_space, log_distance, nearest

__all__ = [
    "CODEGEN_ERROR",
    "INVALID",
    "PRIORITY_SOURCES",
    "SOURCE_COST_MODEL",
    "SOURCE_DESIGN",
    "SOURCE_LOCAL",
    "SOURCE_MODEL",
    "SOURCE_SEARCH",
    "SOURCE_WARM_START",
    "Budget",
    "CachedSchedule",
    "ExecutorLike",
    "MeasurementLike",
    "Progress",
    "SearchConfig",
    "SearchDriver",
    "SearchResult",
    "StopReason",
    "Stopper",
    "TrialRecord",
    "cost_model_seeds",
    "fit_to_space",
    "log_distance",
    "nearest",
    "neighbours",
    "structure_of",
]
