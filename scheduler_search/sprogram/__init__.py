"""sPrograms: schedules built with Append / Wait, their validation and serialisation."""

from scheduler_search.sprogram.plan import (
    Decisions,
    emit_sprogram,
    plan_sprogram,
    resolve_choices,
)
from scheduler_search.sprogram.primitives import ScheduleError, SProgramBuilder
from scheduler_search.sprogram.schedule import (
    BarrierTask,
    Cluster,
    Raster,
    SProgram,
    UnitOp,
    WarpRoles,
)
from scheduler_search.sprogram.validate import (
    Rejection,
    RejectReason,
    Validity,
    check_tiles,
    check_valid,
)

__all__ = [
    "BarrierTask",
    "Cluster",
    "Decisions",
    "Raster",
    "RejectReason",
    "Rejection",
    "SProgram",
    "SProgramBuilder",
    "ScheduleError",
    "UnitOp",
    "Validity",
    "WarpRoles",
    "check_tiles",
    "check_valid",
    "emit_sprogram",
    "plan_sprogram",
    "resolve_choices",
]
