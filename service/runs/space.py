"""The schedule space a run searches: the cost model's space of the workload, restricted to
the schedules code generation can lower for the device.

This is where the two halves meet: ``scheduler_search`` never imports ``codegen``, so the
service gives the space codegen's feasibility check.
"""

from __future__ import annotations

from codegen import feasibility
from scheduler_search.hardware.model import Device
from scheduler_search.ops import OperatorSpec
from scheduler_search.space import Choices, ScheduleSpace


def schedule_space(spec: OperatorSpec, device: Device,
                   fixed: Choices | None = None) -> ScheduleSpace:
    """``spec``'s space on ``device``, without what codegen cannot generate there (the
    slice where ``fixed`` knobs take their values).

    Raises:
        ValueError: ``fixed`` names a knob the space does not have, or an option it lacks.
    """
    return ScheduleSpace(spec, device, feasible=feasibility(spec.op, device), fixed=fixed)


__all__ = ["schedule_space"]
