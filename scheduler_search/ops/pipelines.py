"""Pipelines: an operator users call as one thing that runs as a sequence of kernels.

A pipeline spec (``mamba2_ssd``: Mamba2's whole SSD forward) names the kernel workloads it
may run (each an ordinary :class:`~scheduler_search.ops.OperatorSpec`, tuned and cached
as any other) and its *plans*: the sequences of those kernels that compute its outputs,
one per way of fusing them. Tuning a pipeline tunes every kernel of every plan; the plan
served is the one whose measured kernels make the fastest forward
(:meth:`PipelineSpec.best_plan`), so each fusion is searched against the unfused
sequence rather than taken on faith.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from scheduler_search.canonical import canonical_json, sha256_hex
from scheduler_search.ops._base import OperatorSpec, SpecError

#: A kernel's measured figures as the cache holds them (``latency_us``, and the run's
#: ``baseline_latency_us`` where its peer was timed), by the kernel's role in the pipeline.
Figures = dict[str, dict[str, Any] | None]


class PipelineSpec(BaseModel):
    """Base of every pipeline spec: strict fields as an operator's, the kernels it may run
    and its plans.

    A field problem of one of its kernels' specs is reported under the pipeline's field
    of that name (its fields are the kernels' own)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    op: ClassVar[str]
    #: The operators of the kernels its plans may run (whatever the shape).
    kernel_ops: ClassVar[tuple[str, ...]]

    @abstractmethod
    def kernels(self) -> dict[str, OperatorSpec]:
        """Every kernel workload a plan may run, by role (the kernels' specs, valid)."""

    @abstractmethod
    def plans(self) -> dict[str, tuple[str, ...]]:
        """Plan name -> the roles of the kernels it runs, in order."""

    @abstractmethod
    def plan_latency_us(self, plan: str, figures: Figures) -> float | None:
        """What the plan's kernels cost per call, from their figures (None while one of
        them has none)."""

    @model_validator(mode="after")
    def _check_kernels(self) -> PipelineSpec:
        errors: list[InitErrorDetails] = []
        for error in self._kernel_errors():
            errors.append(InitErrorDetails(
                type=PydanticCustomError("spec_constraint", error["msg"]),
                loc=error["loc"], input=error.get("input")))
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    def _kernel_errors(self) -> list[dict[str, Any]]:
        """The first kernel spec's validation errors, each once."""
        try:
            self.kernels()
        except ValidationError as error:
            return [dict(e) for e in error.errors()]
        return []

    def params(self) -> dict[str, Any]:
        return self.model_dump()

    def canonical_json(self) -> str:
        return canonical_json({"op": self.op, "params": self.params()})

    def workload_key(self) -> str:
        return sha256_hex(self.canonical_json())

    def plan_latencies_us(self, figures: Figures) -> dict[str, float | None]:
        """Every plan's cost from the kernels' figures."""
        return {plan: self.plan_latency_us(plan, figures) for plan in self.plans()}

    def best_plan(self, figures: Figures) -> str | None:
        """The plan whose measured kernels cost least; where no plan is measured in full,
        the first plan whose kernels are all cached (``figures`` names a role only when
        its kernel is cached, with None for figures the cache does not have, e.g. a
        simulated run's); None when no plan has all its kernels."""
        costs = {plan: cost for plan, cost in self.plan_latencies_us(figures).items()
                 if cost is not None}
        if costs:
            return min(costs, key=lambda plan: costs[plan])
        complete = [plan for plan, roles in self.plans().items()
                    if all(role in figures for role in roles)]
        return complete[0] if complete else None


def summed_latency_us(roles: tuple[str, ...], figures: Figures) -> float | None:
    """The kernels' latencies added up, or None while one has none."""
    total = 0.0
    for role in roles:
        figure = figures.get(role)
        if figure is None or figure.get("latency_us") is None:
            return None
        total += float(figure["latency_us"])
    return total


#: Pipeline name -> spec class.
PIPELINES: dict[str, type[PipelineSpec]] = {}


def register_pipeline(spec: type[PipelineSpec]) -> type[PipelineSpec]:
    """Make ``spec`` the spec class of pipeline ``spec.op`` (usable as a decorator)."""
    PIPELINES[spec.op] = spec
    return spec


def parse_pipeline(op: str, params: dict[str, Any]) -> PipelineSpec:
    """Validate ``params`` for pipeline ``op``.

    Raises:
        SpecError: ``op`` is not a pipeline (field ``op``).
        pydantic.ValidationError: a parameter is missing, extra, mistyped or out of range,
            or makes one of the kernels' specs invalid; each error's ``loc`` names it.
    """
    if op not in PIPELINES:
        raise SpecError("op", f"unknown pipeline {op!r}; known: {', '.join(sorted(PIPELINES))}")
    return PIPELINES[op].model_validate(params)


__all__ = ["PIPELINES", "Figures", "PipelineSpec", "parse_pipeline", "register_pipeline",
           "summed_latency_us"]
