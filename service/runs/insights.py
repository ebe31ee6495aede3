"""What the dashboard shows beyond the stored rows: a run's convergence, the importance of
its search choices, the cost model's per-sEU timeline of a schedule, and its kernel source.

Everything here is computed on request, off the tuning path, and the costly parts
(parameter importance, rebuilding an sProgram, the timeline, rendering CUDA) are cached per
app in :class:`Insights`, keyed so that a cached answer can never be stale: importance by
the run's count of measured trials and its status, the others by schedule hash and device.
"""

from __future__ import annotations

import logging
import math
import threading
import warnings
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy.orm import Session

from scheduler_search.cost_model import estimate, shipped_calibration
from scheduler_search.hardware import CATALOG, Device, UnitKind
from scheduler_search.ops import parse_spec
from scheduler_search.sprogram import SProgram
from service.core.db import Database
from service.db import repositories as repo
from service.db.models import DeviceModel, RunModel, as_utc
from service.runs.devices import from_identity
from service.runs.space import schedule_space
from service.schemas import (
    ConvergencePublic,
    ImportanceItem,
    ImportancePublic,
    TimelineEntryPublic,
    TimelinePublic,
    TrialSeriesPublic,
)

logger = logging.getLogger(__name__)

#: Parameter importance is shown once a run has this many measured trials.
MIN_TRIALS_FOR_IMPORTANCE = 10
#: Default number of trials a convergence chart gets (every improvement is kept on top).
DEFAULT_MAX_POINTS = 2000
#: Lanes of the timeline, in this order (the data flow: copy in, multiply, epilogue).
LANE_ORDER = (UnitKind.TMA, UnitKind.LSU, UnitKind.TENSOR_CORE, UnitKind.CUDA_CORE, UnitKind.SFU)

T = TypeVar("T")


class _Cache:
    """A small thread-safe LRU map."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_compute(self, key: Hashable, compute: Callable[[], T]) -> T:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        value = compute()  # outside the lock: two racing requests compute it twice at worst
        with self._lock:
            self._data[key] = value
            while len(self._data) > self._size:
                self._data.popitem(last=False)
        return value


@dataclass(frozen=True)
class KernelSource:
    """A schedule's CUDA source: ``stored`` (a generated kernel in the database) or
    ``rendered`` (generated now from the sProgram by ``codegen.render``)."""

    text: str
    origin: str
    filename: str


class SourceUnavailable(LookupError):
    """No source for this schedule (yet); the message says why, for a person."""


class Insights:
    """The dashboard's computations for one app, with their caches."""

    def __init__(self) -> None:
        self._importance = _Cache(256)
        self._schedules = _Cache(256)
        self._timelines = _Cache(256)
        self._sources = _Cache(64)

    # ----- convergence ---------------------------------------------------------------------
    def convergence(
        self, session: Session, run: RunModel, max_points: int = DEFAULT_MAX_POINTS
    ) -> ConvergencePublic:
        """Every trial (or an even sample of ``max_points`` plus every improvement) and the
        best-so-far steps, each with its trial number and seconds since the run started."""
        rows = repo.trial_series(session, run_id=run.id)  # (number, status, latency, created)
        origin = as_utc(run.started_at) or (repo.parse_timestamp(rows[0][3]) if rows else None)
        statuses: Counter[str] = Counter(row[1] for row in rows)
        best_at: list[int] = []  # indexes into rows where the best improved
        best = math.inf
        for index, row in enumerate(rows):
            latency = row[2]
            if latency is not None and latency < best:
                best = latency
                best_at.append(index)
        keep: list[int]
        downsampled = len(rows) > max_points
        if downsampled:
            stride = len(rows) / max_points
            sample = {int(i * stride) for i in range(max_points)}
            keep = sorted(sample.union(best_at, [len(rows) - 1]))
        else:
            keep = list(range(len(rows)))

        def seconds(raw: Any) -> float:
            created = repo.parse_timestamp(raw)
            if origin is None or created is None:
                return 0.0
            return round(max(0.0, (created - origin).total_seconds()), 3)

        def series(indexes: list[int]) -> TrialSeriesPublic:
            picked = [rows[i] for i in indexes]
            return TrialSeriesPublic(
                number=[r[0] for r in picked],
                t_s=[seconds(r[3]) for r in picked],
                latency_us=[r[2] for r in picked],
                status=[r[1] for r in picked],
            )

        return ConvergencePublic(
            run_id=run.id,
            count=len(rows),
            measured=sum(1 for r in rows if r[2] is not None),
            downsampled=downsampled,
            statuses=dict(statuses),
            trials=series(keep),
            best=series(best_at),
        )

    # ----- parameter importance ------------------------------------------------------------
    def importance(self, db: Database, session: Session, run: RunModel) -> ImportancePublic:
        """Importance of each search choice for the run's measured latency.

        Optuna's PED-ANOVA evaluator over the run's persistent study (Optuna's RDB storage
        in the same database; it needs neither scikit-learn nor SciPy, unlike fANOVA); when
        the study is missing or Optuna cannot answer, a one-way analysis of variance of
        log-latency over the stored trials. Below ``MIN_TRIALS_FOR_IMPORTANCE`` measured
        trials there is nothing to show.
        """
        complete = repo.count_complete_trials(session, run_id=run.id)
        empty = ImportancePublic(
            run_id=run.id, available=False, reason=None, method=None, complete_trials=complete,
            min_trials=MIN_TRIALS_FOR_IMPORTANCE, data=[],
        )
        if complete < MIN_TRIALS_FOR_IMPORTANCE:
            return empty.model_copy(update={
                "reason": f"{complete} measured trial(s); importance needs "
                          f"{MIN_TRIALS_FOR_IMPORTANCE}",
            })
        key = (run.id, complete, run.status)

        def compute() -> ImportancePublic:
            method, values = _optuna_importance(db, run.study_name)
            if not values:
                method, values = _anova_importance(session, run.id)
            if not values:
                return empty.model_copy(update={"reason": "no search choice varies"})
            data = [ImportanceItem(param=k, importance=round(v, 4)) for k, v in values.items()]
            data.sort(key=lambda item: -item.importance)
            return empty.model_copy(update={"available": True, "method": method, "data": data})

        return self._importance.get_or_compute(key, compute)

    # ----- schedules -----------------------------------------------------------------------
    def run_schedule(self, session: Session, run: RunModel) -> dict[str, Any] | None:
        """The sProgram JSON of the run's best schedule: its cache entry, or rebuilt from
        the choices of the trial that measured it (a running or cancelled run)."""
        digest = run.best_schedule_hash
        if digest is None:
            return None
        stored = repo.schedule_of_run(session, run_id=run.id, schedule_hash=digest)
        if stored is not None:
            return stored.schedule
        choices = repo.trial_choices(session, run_id=run.id, schedule_hash=digest)
        if choices is None:
            return None
        workload, device = run.workload, run.device

        def rebuild() -> dict[str, Any] | None:
            try:
                space = schedule_space(parse_spec(workload.op, workload.params), _model(device))
                sprogram, _ = space.build(choices)
            except Exception:
                logger.exception("run %d: could not rebuild schedule %s", run.id, digest)
                return None
            return sprogram.to_dict() if sprogram.hash == digest else None

        return self._schedules.get_or_compute((digest, device.key), rebuild)

    def timeline(self, schedule: dict[str, Any], device: DeviceModel) -> TimelinePublic:
        """The cost model's estimate of ``schedule`` on ``device`` with its timeline."""
        sprogram = SProgram.from_dict(schedule)
        return self._timelines.get_or_compute(
            (sprogram.hash, device.key), lambda: _timeline(sprogram, device)
        )

    def source(
        self, session: Session, schedule: dict[str, Any], kernel_hash: str | None,
        device: DeviceModel,
    ) -> KernelSource:
        """The kernel source: the stored kernel, else rendered now (for operators that
        code generation covers).

        Raises:
            SourceUnavailable: neither (the message says why).
        """
        if kernel_hash is not None:
            row = repo.get_kernel(session, kernel_hash=kernel_hash)
            if row is not None:
                return KernelSource(row.source, "stored", f"{kernel_hash[:16]}.cu")
        sprogram = SProgram.from_dict(schedule)
        result = self._sources.get_or_compute(
            (sprogram.hash, device.key), lambda: _render(sprogram, device)
        )
        if isinstance(result, str):
            raise SourceUnavailable(result)
        return result


# ----- helpers ------------------------------------------------------------------------------
def _model(device: DeviceModel) -> Device:
    """The hardware model of a stored device; the catalog GPU of its architecture when the
    device is not on this host (a ``cuda:N`` row read by another machine)."""
    try:
        return from_identity(device.kind, device.name, device.identity)
    except Exception:
        wanted = device.identity.get("live", device.identity.get("device", {})).get("name")
        for model in CATALOG.values():
            if model.name == wanted:
                return model
        return CATALOG["h200"]


def _lanes(model: Device, sprogram: SProgram, entries: list[TimelineEntryPublic]) -> list[str]:
    used = {e.unit for e in entries} | {str(u) for u in sprogram.mapping.values()}
    have = {str(kind) for kind in model.unit_kinds()}
    lanes = [str(kind) for kind in LANE_ORDER if str(kind) in used | have]
    return lanes + sorted(used - set(lanes))


def _timeline(sprogram: SProgram, device: DeviceModel) -> TimelinePublic:
    """The cost model's block of ``sprogram``; on a simulated device with the calibration
    it measures with (shipped for sim:h200 GEMMs), so that ``predicted_us`` is the
    latency its runs report for the schedule (issue 42: 151 us here, 201 us in the run)."""
    model = _model(device)
    spec = parse_spec(sprogram.op, sprogram.params)
    calibration = shipped_calibration(model.name, spec.op) if device.simulated else None
    if calibration is None:
        result = estimate(sprogram, spec, model)
        predicted_us = result.latency_us
    else:
        result = estimate(sprogram, spec, calibration.device(model), calibration.timings())
        predicted_us = calibration.scaled_us(result.latency_us, result.bound, spec)
    entries = [
        TimelineEntryPublic(
            unit=e.unit, stask=e.stask, role=e.role, iteration=e.iteration,
            start_us=round(e.start_us, 6), end_us=round(e.end_us, 6),
        )
        for e in result.timeline
    ]
    roles = sprogram.to_dict()["roles"]
    return TimelinePublic(
        schedule_hash=sprogram.hash,
        op=sprogram.op,
        device=device.name,
        predicted_us=predicted_us,
        calibrated=calibration is not None,
        bound=result.bound,
        compute_us=result.compute_us,
        dram_us=result.dram_us,
        tile_us=result.tile_us,
        tiles=result.tiles,
        unit_utilisation={str(k): round(v, 4) for k, v in result.unit_utilisation.items()},
        lanes=_lanes(model, sprogram, entries),
        mapping={k: str(v) for k, v in sprogram.mapping.items()},
        stages=dict(sprogram.stages),
        roles=roles,
        tile=dict(sprogram.tile),
        entries=entries,
    )


def _render(sprogram: SProgram, device: DeviceModel) -> KernelSource | str:
    """The rendered source, or why there is none (a string)."""
    from codegen.render import has_renderer, render

    if not has_renderer(sprogram.op):
        return f"not generated yet: code generation does not cover {sprogram.op} yet"
    try:
        artifact = render(sprogram, device=_model(device))
    except Exception as exc:  # Unsupported, or a renderer bug: show it, do not fail the page
        return f"not generated yet: the renderer cannot generate this schedule ({exc})"
    return KernelSource(artifact.source, "rendered", f"{sprogram.hash[:16]}.cu")


def _optuna_importance(db: Database, study_name: str) -> tuple[str, dict[str, float]]:
    import optuna
    from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances

    try:
        study = optuna.load_study(study_name=study_name, storage=db.optuna_storage())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "few trials in a regime": expected early on
            values = get_param_importances(study, evaluator=PedAnovaImportanceEvaluator())
    except Exception as exc:  # no such study (imported runs), too few trials, ...
        logger.info("Optuna importance of %s unavailable: %s", study_name, exc)
        return "", {}
    return "optuna PED-ANOVA", {k: float(v) for k, v in values.items() if math.isfinite(v)}


def _anova_importance(session: Session, run_id: int) -> tuple[str, dict[str, float]]:
    """Share of the variance of log-latency between the groups of each choice's values
    (eta squared), normalised to sum to 1; a trial without the choice is its own group."""
    rows, _ = repo.list_trials(session, run_id=run_id, limit=1_000_000)
    measured = [(r.choices, math.log(r.latency_us)) for r in rows
                if r.latency_us is not None and r.latency_us > 0]
    if len(measured) < 2:
        return "", {}
    mean = sum(y for _, y in measured) / len(measured)
    total = sum((y - mean) ** 2 for _, y in measured)
    if total <= 0:
        return "", {}
    params = sorted({k for choices, _ in measured for k in choices})
    raw: dict[str, float] = {}
    for param in params:
        groups: dict[str, list[float]] = {}
        for choices, y in measured:
            groups.setdefault(repr(choices.get(param, "—")), []).append(y)
        if len(groups) < 2:
            continue
        between = sum(len(ys) * (sum(ys) / len(ys) - mean) ** 2 for ys in groups.values())
        raw[param] = between / total
    norm = sum(raw.values())
    if norm <= 0:
        return "", {}
    return "one-way ANOVA of log latency", {k: v / norm for k, v in raw.items()}


__all__ = [
    "DEFAULT_MAX_POINTS",
    "MIN_TRIALS_FOR_IMPORTANCE",
    "Insights",
    "KernelSource",
    "SourceUnavailable",
]
