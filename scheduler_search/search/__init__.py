"""The search: Optuna over a schedule space, proposal sources composed by presets,
batches measured by an executor."""

from scheduler_search.search.config import SearchConfig
from scheduler_search.search.driver import SearchDriver
from scheduler_search.search.executor import ExecutorLike, MeasurementLike
from scheduler_search.search.presets import (
    FINAL_TIMING,
    GPU,
    SEARCH_TIMING,
    SIMULATED,
    SearchPreset,
    TimingPolicy,
)
from scheduler_search.search.proposals import (
    SOURCES,
    CostModelSource,
    NeighboursSource,
    Proposal,
    ProposalSource,
    Round,
    SamplerSource,
    SeedsSource,
    neighbours,
)
from scheduler_search.search.records import (
    CODEGEN_ERROR,
    INVALID,
    PRIORITY_SOURCES,
    SOURCE_COST_MODEL,
    SOURCE_DESIGN,
    SOURCE_LOCAL,
    SOURCE_MODEL,
    SOURCE_SEARCH,
    SOURCE_WARM_START,
    Progress,
    SearchCallbacks,
    SearchResult,
    TrialRecord,
)
from scheduler_search.search.seeding import cost_model_seeds, structure_of
from scheduler_search.search.stopping import Budget, Stopper, StopReason
from scheduler_search.search.warm_start import CachedSchedule, fit_to_space, log_distance, nearest

__all__ = [
    "CODEGEN_ERROR",
    "FINAL_TIMING",
    "GPU",
    "INVALID",
    "PRIORITY_SOURCES",
    "SEARCH_TIMING",
    "SIMULATED",
    "SOURCES",
    "SOURCE_COST_MODEL",
    "SOURCE_DESIGN",
    "SOURCE_LOCAL",
    "SOURCE_MODEL",
    "SOURCE_SEARCH",
    "SOURCE_WARM_START",
    "Budget",
    "CachedSchedule",
    "CostModelSource",
    "ExecutorLike",
    "MeasurementLike",
    "NeighboursSource",
    "Progress",
    "Proposal",
    "ProposalSource",
    "Round",
    "SamplerSource",
    "SearchCallbacks",
    "SearchConfig",
    "SearchDriver",
    "SearchPreset",
    "SearchResult",
    "SeedsSource",
    "StopReason",
    "Stopper",
    "TimingPolicy",
    "TrialRecord",
    "cost_model_seeds",
    "fit_to_space",
    "log_distance",
    "nearest",
    "neighbours",
    "structure_of",
]
