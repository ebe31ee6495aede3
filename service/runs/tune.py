"""A tune request, validated: operator spec (or range spec), device, budget (every error
names its field)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import ValidationError

from scheduler_search.ops import (
    PIPELINES,
    OperatorSpec,
    RangeSpec,
    SpecError,
    parse_spec,
    runtime_dims,
)
from scheduler_search.ops.ranges import is_range_value, parse_range_spec
from service.core.config import Settings
from service.db.fleet import FleetDevice
from service.errors import InvalidRequest
from service.runs import fleet
from service.runs.devices import (
    DEFAULT_SIMULATED,
    DeviceError,
    ResolvedDevice,
    resolve_device,
    simulated,
)
from service.schemas import BudgetIn, TuneRequest

if TYPE_CHECKING:
    from service.runs.pipelines import PipelineTuneInput


@dataclass(frozen=True)
class TuneInput:
    """What a run needs, all checked. ``force``: run even on a cache hit; ``extend``:
    continue the workload's newest run with ``trials`` / ``seconds`` more."""

    spec: OperatorSpec
    device: ResolvedDevice
    trials: int
    seconds: float | None
    patience: int | None
    seed: int
    force: bool = False
    extend: bool = False


@dataclass(frozen=True)
class RangeTuneInput:
    """A range run's request, all checked: the range spec (one range axis, its
    dimensions ones the operator's kernels take at run time), the device, the budget
    (``trials``: measurements, one candidate at one size each)."""

    range_spec: RangeSpec
    device: ResolvedDevice
    trials: int
    seconds: float | None
    patience: int | None
    seed: int
    force: bool = False
    extend: bool = False

    @property
    def dim(self) -> str:
        """The range axis's primary dimension (a table's ``dim``)."""
        return self.range_spec.dim


def spec_errors(exc: ValidationError) -> list[dict[str, object]]:
    return [
        {"loc": ("params", *e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()
    ]


def _budget_errors(budget: BudgetIn, settings: Settings) -> list[dict[str, object]]:
    """This server's own limits (``PIPETUNE_MAX_TRIALS``, ``PIPETUNE_MAX_SECONDS``), within
    the schema's absolute bounds."""
    errors: list[dict[str, object]] = []
    if budget.trials is not None and budget.trials > settings.max_trials:
        errors.append({"loc": ("budget", "trials"), "type": "less_than_equal",
                       "msg": f"at most {settings.max_trials} trials on this server "
                              "(PIPETUNE_MAX_TRIALS)"})
    if budget.seconds is not None and budget.seconds > settings.max_seconds:
        errors.append({"loc": ("budget", "seconds"), "type": "less_than_equal",
                       "msg": f"at most {settings.max_seconds:g} seconds on this server "
                              "(PIPETUNE_MAX_SECONDS)"})
    return errors


def _device(name: str, fleet_devices: Callable[[], list[FleetDevice]] | None) -> ResolvedDevice:
    """A local or simulated device, or a registered fleet device (``fleet:...``)."""
    if not name.strip().lower().startswith(fleet.PREFIX):
        return resolve_device(name)
    if fleet_devices is None:
        raise DeviceError(f"{name!r}: fleet devices are named through the service, whose "
                          "database knows the fleet (pipetune serve, POST /v1/tune)")
    return fleet.resolve(name, fleet_devices)


def prepare_any(request: TuneRequest, settings: Settings,
                fleet_devices: Callable[[], list[FleetDevice]] | None = None,
                ) -> TuneInput | RangeTuneInput | PipelineTuneInput:
    """:func:`~service.runs.pipelines.prepare_pipeline` for a pipeline (``mamba2_ssd``),
    :func:`prepare_range` where a parameter is a range or a list of sizes, else
    :func:`prepare`.

    Raises:
        InvalidRequest: with one item per problem, each under its body path.
    """
    if request.op in PIPELINES:
        # A pipeline's kernels are each prepared by this module's prepare().
        from service.runs.pipelines import prepare_pipeline

        return prepare_pipeline(request, settings, fleet_devices)
    if ranged(request.op, request.params):
        return prepare_range(request, settings, fleet_devices)
    return prepare(request, settings, fleet_devices)


def ranged(op: str, params: dict[str, object]) -> bool:
    """Whether ``params`` give one of ``op``'s range dimensions (``runtime_dims``) as a range
    or a list of sizes (a nested model's object, a GEMM's ``epilogue``, is not one)."""
    dims = runtime_dims(op)
    return any(is_range_value(v, range_dim=True) and k in dims for k, v in params.items())


def _spec_error_item(exc: SpecError) -> dict[str, object]:
    """A spec error under its body path (``params.m.min``; ``op`` for the operator,
    ``params`` for the workload as a whole)."""
    if exc.field in ("op", "params"):
        return {"loc": (exc.field,), "msg": exc.message, "type": "spec_error"}
    parts = [int(p) if p.isdigit() else p for p in str(exc.field).split(".")]
    return {"loc": ("params", *parts), "msg": exc.message, "type": "spec_error"}


def prepare_range(request: TuneRequest, settings: Settings,
                  fleet_devices: Callable[[], list[FleetDevice]] | None = None,
                  ) -> RangeTuneInput:
    """Validate a range request: the range spec (``parse_range_spec``: a malformed range
    is named by its field, ``params.m.min``; attention's two lengths as two different
    ranges, ``params.seq_kv``; only dimensions the operator's kernels take at run time,
    its spec's ``runtime_dims``), the device (as :func:`prepare`; the
    workload at the range's high end must fit it), the budget (``trials`` default: the
    range search's, ``RangeConfig.default_trials``).

    Raises:
        InvalidRequest: with one item per problem, each under its body path.
    """
    from scheduler_search.search.range_search import RangeConfig

    errors: list[dict[str, object]] = []
    range_spec: RangeSpec | None = None
    try:
        range_spec = parse_range_spec(request.op, request.params)
    except SpecError as exc:
        errors.append(_spec_error_item(exc))
    except ValidationError as exc:
        errors.extend(spec_errors(exc))
    device = _checked_device(request, fleet_devices, errors,
                             range_spec.op if range_spec is not None else None)
    if request.budget.patience is not None:
        errors.append({"loc": ("budget", "patience"), "type": "value_error",
                       "msg": "a range run does not stop on patience; give it trials or "
                              "seconds"})
    if range_spec is not None and device is not None and not errors:
        high = {name: r.high for name, r in range_spec.ranges.items()}
        try:
            range_spec.exact(high).check_fits(device.model)
        except SpecError as exc:
            errors.append(_spec_error_item(exc))
    errors.extend(request_errors(request, settings))
    if errors:
        raise InvalidRequest(errors)
    assert range_spec is not None and device is not None
    trials, seconds = _trials(request, settings,
                              RangeConfig(**settings.range_search).default_trials)
    return RangeTuneInput(range_spec=range_spec, device=device, trials=trials, seconds=seconds,
                          patience=None, seed=settings.seed, force=request.force,
                          extend=request.extend)


def _checked_device(request: TuneRequest,
                    fleet_devices: Callable[[], list[FleetDevice]] | None,
                    errors: list[dict[str, object]], op: str | None) -> ResolvedDevice | None:
    """The request's device (an error added if there is none); ``device: auto`` for an
    operator without code generation is the simulated GPU."""
    try:
        device = _device(request.device, fleet_devices)
    except DeviceError as exc:
        errors.append({"loc": ("device",), "msg": str(exc), "type": "device_error"})
        return None
    if op is not None and not device.simulated:
        from codegen import has_renderer

        if not has_renderer(op):
            if request.device.strip().lower() == "auto":
                # No kernels to measure for this operator yet: tune it on the simulated GPU.
                return simulated(DEFAULT_SIMULATED)
            errors.append({
                "loc": ("device",),
                "msg": f"no code generation for {op!r} yet, so it cannot be measured "
                       f"on {device.name}; use device 'auto' or '{DEFAULT_SIMULATED}'",
                "type": "device_error",
            })
            return None
    return device


def request_errors(request: TuneRequest, settings: Settings) -> list[dict[str, object]]:
    """The budget's and the flags' problems."""
    errors = _budget_errors(request.budget, settings)
    if request.budget.patience is not None and request.extend:
        errors.append({"loc": ("budget", "patience"), "type": "value_error",
                       "msg": "extend continues a run with its own patience; give patience "
                              "to a new run (force, or a first tune)"})
    if request.force and request.extend:
        errors.append({"loc": ("extend",), "type": "value_error",
                       "msg": "choose one of force (a new search) and extend (continue the "
                              "newest run's search)"})
    return errors


def _trials(request: TuneRequest, settings: Settings, default: int) -> tuple[int, float | None]:
    """The trial budget (``default`` when neither trials nor seconds are given; the
    server's most with only seconds) and the seconds."""
    budget = request.budget
    trials = budget.trials
    if trials is None:
        trials = (settings.max_trials if budget.seconds is not None
                  else min(default, settings.max_trials))
    return trials, budget.seconds


def prepare(request: TuneRequest, settings: Settings,
            fleet_devices: Callable[[], list[FleetDevice]] | None = None) -> TuneInput:
    """Validate ``request`` against the operator table, the device, the settings;
    ``fleet_devices`` lists the registered fleet (read only for a ``fleet:`` name).

    Raises:
        InvalidRequest: with one item per problem, each under its body path.
    """
    errors: list[dict[str, object]] = []
    spec: OperatorSpec | None = None
    device: ResolvedDevice | None = None
    try:
        spec = parse_spec(request.op, request.params)
    except SpecError as exc:
        loc = (exc.field,) if exc.field == "op" else ("params", exc.field)
        errors.append({"loc": loc, "msg": exc.message, "type": "spec_error"})
    except ValidationError as exc:
        errors.extend(spec_errors(exc))
    try:
        device = _device(request.device, fleet_devices)
    except DeviceError as exc:
        errors.append({"loc": ("device",), "msg": str(exc), "type": "device_error"})
    if spec is not None and device is not None and not device.simulated:
        from codegen import has_renderer

        if not has_renderer(spec.op):
            if request.device.strip().lower() == "auto":
                # No kernels to measure for this operator yet: tune it on the simulated GPU.
                device = simulated(DEFAULT_SIMULATED)
            else:
                errors.append({
                    "loc": ("device",),
                    "msg": f"no code generation for {spec.op!r} yet, so it cannot be measured "
                           f"on {device.name}; use device 'auto' or '{DEFAULT_SIMULATED}'",
                    "type": "device_error",
                })
                device = None
    if spec is not None and device is not None:
        try:
            spec.check_fits(device.model)
        except SpecError as exc:
            errors.append(_spec_error_item(exc))
    errors.extend(request_errors(request, settings))
    if errors:
        raise InvalidRequest(errors)
    assert spec is not None and device is not None
    budget = request.budget
    trials = budget.trials
    if trials is None:
        trials = (settings.max_trials if budget.seconds is not None
                  else min(settings.default_trials, settings.max_trials))
    return TuneInput(
        spec=spec,
        device=device,
        trials=trials,
        seconds=budget.seconds,
        patience=budget.patience or settings.default_patience or None,
        seed=settings.seed,
        force=request.force,
        extend=request.extend,
    )
