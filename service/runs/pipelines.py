"""A pipeline's tune (``mamba2_ssd``): one ordinary run per kernel its plans may run, and
the answer that puts their cached schedules together (the plan served, what it costs).

Each kernel is a workload of its own, so its run is shared with, and its schedule cached
for, anyone who tunes that kernel directly. The request's budget is split evenly between
the kernels (``trials`` rounded up, ``seconds`` divided), so that a pipeline tuned for 60
s spends about 60 s.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import ValidationError

from scheduler_search.ops import PipelineSpec, SpecError, parse_pipeline
from service.core.config import Settings
from service.db.fleet import FleetDevice
from service.errors import InvalidRequest
from service.runs.tune import TuneInput, prepare, request_errors, spec_errors
from service.schemas import (
    BudgetIn,
    PipelineKernelPublic,
    PipelinePlanPublic,
    PipelinePublic,
    RunPublic,
    SchedulePublic,
    TuneRequest,
)


@dataclass(frozen=True)
class PipelineTuneInput:
    """A pipeline's request, all checked: its spec and each kernel's tune, by role."""

    spec: PipelineSpec
    kernels: dict[str, TuneInput]
    force: bool = False
    extend: bool = False

    @property
    def device_name(self) -> str:
        return next(iter(self.kernels.values())).device.name


def prepare_pipeline(request: TuneRequest, settings: Settings,
                     fleet_devices: Callable[[], list[FleetDevice]] | None = None
                     ) -> PipelineTuneInput:
    """Validate a pipeline's request: its params (a kernel's problem under the pipeline's
    field of that name), the budget and flags, then each kernel's tune on the device.

    Raises:
        InvalidRequest: with one item per problem, each under its body path.
    """
    errors = request_errors(request, settings)
    spec = None
    try:
        spec = parse_pipeline(request.op, request.params)
    except SpecError as exc:
        errors.append({"loc": ("op",), "msg": exc.message, "type": "spec_error"})
    except ValidationError as exc:
        errors.extend(spec_errors(exc))
    if errors or spec is None:
        raise InvalidRequest(errors)
    kernels = spec.kernels()
    budget = split_budget(request.budget, len(kernels))
    tunes = {}
    for role, kernel in kernels.items():
        part = request.model_copy(update={"op": kernel.op, "params": kernel.params(),
                                          "budget": budget})
        tunes[role] = prepare(part, settings, fleet_devices)
    return PipelineTuneInput(spec=spec, kernels=tunes, force=request.force,
                             extend=request.extend)


def split_budget(budget: BudgetIn, parts: int) -> BudgetIn:
    """A kernel's share of the pipeline's budget (patience, a per-run limit, is kept)."""
    update: dict[str, object] = {}
    if budget.trials is not None:
        update["trials"] = math.ceil(budget.trials / parts)
    if budget.seconds is not None:
        update["seconds"] = budget.seconds / parts
    return budget.model_copy(update=update)


def pipeline_public(tune: PipelineTuneInput,
                    parts: dict[str, tuple[RunPublic | None, SchedulePublic | None]]
                    ) -> PipelinePublic:
    """The pipeline's answer from each kernel's run and cached schedule."""
    spec = tune.spec
    figures = {role: {"latency_us": schedule.latency_us,
                      "baseline_latency_us": schedule.baseline_latency_us}
               for role, (_, schedule) in parts.items() if schedule is not None}
    costs = spec.plan_latencies_us(figures)
    plan = spec.best_plan(figures)
    return PipelinePublic(
        op=spec.op, params=spec.params(), device=tune.device_name, plan=plan,
        latency_us=costs.get(plan) if plan is not None else None,
        plans={name: PipelinePlanPublic(kernels=list(roles), latency_us=costs[name])
               for name, roles in spec.plans().items()},
        kernels=[PipelineKernelPublic(role=role, op=tune.kernels[role].spec.op,
                                      params=tune.kernels[role].spec.params(), run=run,
                                      schedule=schedule)
                 for role, (run, schedule) in parts.items()],
    )


def pending_run(parts: dict[str, tuple[RunPublic | None, SchedulePublic | None]]
                ) -> RunPublic | None:
    """The first kernel's run that has no schedule cached yet (None: every one has)."""
    for run, schedule in parts.values():
        if schedule is None:
            return run
    return None


__all__ = ["PipelineTuneInput", "pending_run", "pipeline_public", "prepare_pipeline",
           "split_budget"]
