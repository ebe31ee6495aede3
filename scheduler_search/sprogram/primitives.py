"""The paper's scheduling primitives, Append and Wait, over an sProgram under construction.

``Propagate`` (tile shapes from the output tile) lives with the IR in
``scheduler_search.ir``. A plan builds an sProgram by Appending sTask instances to sEUs in
issue order and Waiting where an sTask must not start before others have finished.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Literal

from scheduler_search.hardware.model import Device, UnitKind
from scheduler_search.ir import STaskGraph
from scheduler_search.sprogram.schedule import (
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


class ScheduleError(ValueError):
    """An Append or Wait that breaks the graph's or the device's rules."""


class SProgramBuilder:
    """Accumulates Append / Wait calls; :meth:`build` freezes the result.

    Args:
        graph: the sTask-graph being scheduled.
        device: the target; Append refuses sEUs the device lacks.
        mapping: the sEU chosen for each sTask (must be one of the sTask's ``units``).
    """

    def __init__(self, graph: STaskGraph, device: Device, mapping: dict[str, UnitKind]) -> None:
        self.graph = graph
        self.device = device
        self.mapping = dict(mapping)
        self._programs: dict[UnitKind, list[UnitOp]] = defaultdict(list)
        self._barriers: list[BarrierTask] = []
        self._steps: dict[str, int] = defaultdict(int)
        for name, unit in self.mapping.items():
            task = graph.stask(name)
            if unit not in task.units:
                raise ScheduleError(f"{name} cannot run on {unit.value}; it runs on {task.units}")
            if unit not in device.unit_kinds():
                raise ScheduleError(f"{device.name} has no {unit.value} unit for {name}")
        missing = set(graph.names()) - set(self.mapping)
        if missing:
            raise ScheduleError(f"no sEU chosen for {sorted(missing)}")

    def append(self, stask: str, *, role: str, lead: int = 0) -> UnitOp:
        """Append: issue ``stask`` next in ``role``'s stream, on the sEU it is mapped to."""
        if stask not in self.mapping:
            raise ScheduleError(f"{self.graph.op} graph has no sTask {stask!r}")
        unit = self.mapping[stask]
        op = UnitOp(stask=stask, role=role, step=self._steps[role], lead=lead)
        self._steps[role] += 1
        self._programs[unit].append(op)
        return op

    def wait(
        self,
        waiter: str,
        deps: list[tuple[str, int]],
        *,
        name: str,
        kind: BarrierKind = BarrierKind.STAGE,
        slots: int = 1,
        role: str = "consumer",
    ) -> BarrierTask:
        """Wait: a barrier sTask before ``waiter`` on each ``(sTask, iteration distance)``."""
        names = set(self.graph.names())
        if waiter not in names:
            raise ScheduleError(f"barrier {name}: unknown waiting sTask {waiter}")
        for dep, distance in deps:
            if dep not in names:
                raise ScheduleError(f"barrier {name}: unknown sTask {dep}")
            if distance < 0:
                raise ScheduleError(f"barrier {name}: cannot wait on a future iteration of {dep}")
        barrier = BarrierTask(name, waiter, tuple(deps), kind, slots, role)
        self._barriers.append(barrier)
        return barrier

    def build(
        self,
        *,
        params: dict[str, Any],
        roles: WarpRoles,
        streams: dict[str, tuple[str, ...]],
        stages: dict[str, int],
        order: str,
        consumer_split: Literal["cooperative", "pingpong"],
        raster: Raster,
        persistent: bool,
        choices: dict[str, Any],
        cluster: Cluster | None = None,
        stream_k: StreamK | None = None,
        swap_ab: bool = False,
        split_k: SplitK | None = None,
    ) -> SProgram:
        return SProgram(
            op=self.graph.op,
            params=dict(params),
            arch=self.device.arch,
            tile=dict(self.graph.tile),
            mapping=dict(self.mapping),
            programs={unit: tuple(ops) for unit, ops in sorted(self._programs.items())},
            barriers=tuple(self._barriers),
            roles=roles,
            streams=dict(streams),
            stages=dict(stages),
            order=order,
            consumer_split=consumer_split,
            raster=raster,
            persistent=persistent,
            choices=dict(choices),
            cluster=cluster,
            stream_k=stream_k,
            swap_ab=swap_ab,
            split_k=split_k,
        )
