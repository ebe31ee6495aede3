"""sPrograms: schedules built with Append / Wait, their validation and serialisation."""

from scheduler_search.sprogram.plan import (
    Decisions,
    emit_sprogram,
    plan_sprogram,
    resolve_choices,
)
from scheduler_search.sprogram.primitives import ScheduleError, SProgramBuilder
from scheduler_search.sprogram.schedule import (
    SPLIT_K_REDUCES,
    BarrierKind,
    BarrierTask,
    Cluster,
    Raster,
    SplitK,
    SProgram,
    StreamK,
    UnitOp,
    WarpRoles,
)
from scheduler_search.sprogram.stream_k import StreamKShare
from scheduler_search.sprogram.validate import (
    Rejection,
    RejectReason,
    Validity,
    check_tiles,
    check_valid,
    stream_k_share,
)

__all__ = [
    "SPLIT_K_REDUCES",
    "BarrierKind",
    "BarrierTask",
    "Cluster",
    "Decisions",
    "Raster",
    "RejectReason",
    "Rejection",
    "SProgram",
    "SProgramBuilder",
    "ScheduleError",
    "SplitK",
    "StreamK",
    "StreamKShare",
    "UnitOp",
    "Validity",
    "WarpRoles",
    "check_tiles",
    "check_valid",
    "emit_sprogram",
    "plan_sprogram",
    "resolve_choices",
    "stream_k_share",
]
