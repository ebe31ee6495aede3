"""sPrograms: schedules built with Append / Wait, their validation and serialisation."""

from scheduler_search.sprogram.plan import plan_sprogram
from scheduler_search.sprogram.primitives import ScheduleError, SProgramBuilder
from scheduler_search.sprogram.schedule import BarrierTask, Raster, SProgram, UnitOp, WarpRoles
from scheduler_search.sprogram.validate import RejectReason, Rejection, Validity, check_valid

__all__ = [
    "BarrierTask",
    "Raster",
    "RejectReason",
    "Rejection",
    "SProgram",
    "SProgramBuilder",
    "ScheduleError",
    "UnitOp",
    "Validity",
    "WarpRoles",
    "check_valid",
    "plan_sprogram",
]
