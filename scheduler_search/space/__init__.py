"""Schedule spaces: knob tables per operator and device, enumeration and sampling."""

from scheduler_search.space.knobs import Choices, Knob
from scheduler_search.space.ranking import (
    Ranked,
    Selected,
    finalist,
    finalize,
    rank_top,
    select_top,
)
from scheduler_search.space.space import Candidate, Feasibility, ScheduleSpace, SpaceCount
from scheduler_search.space.tables import knob_table

__all__ = [
    "Candidate",
    "Choices",
    "Feasibility",
    "Knob",
    "Ranked",
    "ScheduleSpace",
    "Selected",
    "SpaceCount",
    "finalist",
    "finalize",
    "knob_table",
    "rank_top",
    "select_top",
]
