"""A tune request, validated: operator spec, device, budget (every error names its field)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pydantic import ValidationError

from scheduler_search.ops import OperatorSpec, SpecError, parse_spec
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


def _spec_errors(exc: ValidationError) -> list[dict[str, object]]:
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
        errors.extend(_spec_errors(exc))
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
            errors.append({"loc": ("params",), "msg": exc.message, "type": "spec_error"})
    errors.extend(_budget_errors(request.budget, settings))
    if request.force and request.extend:
        errors.append({"loc": ("extend",), "type": "value_error",
                       "msg": "choose one of force (a new search) and extend (continue the "
                              "newest run's search)"})
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
        patience=settings.default_patience or None,
        seed=settings.seed,
        force=request.force,
        extend=request.extend,
    )
