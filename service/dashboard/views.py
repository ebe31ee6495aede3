"""What the dashboard's templates show of a run or a cache entry, formatted once here so
that the runs list, its live refresh and the run page agree."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from scheduler_search.ops import OPERATORS
from service.dashboard.operators import peer_name
from service.db.models import RangeTableModel, RunModel, RunStatus, as_utc, utcnow
from service.schemas import timing_method_text

#: What every latency of a simulated device is, said where it is shown (on hover).
ESTIMATE_NOTE = (
    "Cost-model estimate, not a measurement: the simulated device runs no kernel. "
    "On sim:h200 GEMM estimates are calibrated on H200 measurements (within about 9% of "
    "the measured kernel on the GEMM suite); other operators' are the analytic model's."
)

#: What each GPU timing method is, said on hover where a measured latency or a speedup
#: says how it was timed (``scheduler_search.search.presets.timing_method`` picks one per
#: workload; ours and the vendor peers' alike).
TIMING_NOTES = {
    "events": "Per-launch CUDA events, the L2 flushed before each launch: the method for "
              "long kernels, where a sample's overhead is lost.",
    "graph": "Many launches replayed from a CUDA graph over operand copies larger than the "
             "L2: the method for short or memory-bound kernels, timed as a model's step "
             "runs them back to back.",
}

_DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float8_e4m3": "fp8"}


def _in_spec_order(op: str, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` in the order of the operator spec's fields (PostgreSQL's JSONB does not
    keep the order they were written in)."""
    spec = OPERATORS.get(op)
    if spec is None:
        return params
    order = {name: i for i, name in enumerate(spec.model_fields)}
    return dict(sorted(params.items(), key=lambda item: order.get(item[0], len(order))))


def _size_text(value: Any) -> str | None:
    """A size as a shape shows it: ``4096``, a range ``1..4096`` or listed sizes
    ``{16,300}`` (a range workload's, ``RangeSpec.to_json``); None: not a size."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dict) and {"min", "max"} <= value.keys():
        return f"{value['min']}..{value['max']}"
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return "{" + ",".join(map(str, value)) + "}"
    return None


def shape_text(op: str, params: dict[str, Any]) -> str:
    """A workload's shape in a few words: ``m=4096 n=4096 k=4096 · fp16 · kn`` (a range
    workload's ``m=1..16384 n=4096 ...``)."""
    params = _in_spec_order(op, params)
    sizes = [f"{k}={size}" for k, v in params.items() if (size := _size_text(v)) is not None]
    flags = [k for k, v in params.items() if v is True]
    words = [str(_DTYPES.get(v, v)) for k, v in params.items() if isinstance(v, str)]
    return " · ".join(part for part in (" ".join(sizes), *words, *flags) if part)


def latency_text(latency_us: float | None) -> str:
    if latency_us is None:
        return "—"
    if latency_us >= 1000:
        return f"{latency_us / 1000:.3f} ms"
    return f"{latency_us:.2f} µs"


def duration_text(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def time_text(value: dt.datetime | None) -> str:
    value = as_utc(value)
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value else "—"


def short_time_text(value: dt.datetime | None) -> str:
    """Minutes are enough in a table's column (``time_text`` goes in its tooltip)."""
    value = as_utc(value)
    return value.strftime("%Y-%m-%d %H:%M") if value else "—"


def iso(value: dt.datetime | None) -> str:
    value = as_utc(value)
    return value.isoformat().replace("+00:00", "Z") if value else ""


def speedup_text(latency_us: float | None, baseline_us: float | None) -> str:
    """``1.23×`` (the vendor baseline's latency over ours), or ``—`` without a baseline."""
    if latency_us is None or baseline_us is None or latency_us <= 0:
        return "—"
    return f"{baseline_us / latency_us:.2f}×"


def vendor_baseline_us(row: Any) -> float | None:
    """The vendor peer's latency (cuBLAS for a GEMM) stored with a run or a cache entry.

    Only a GPU run times the vendor peer (in the same worker, by the same method); a
    simulated one never has a baseline and shows ``—``. Read with ``getattr``: the
    ``baseline_latency_us`` columns arrive with the GPU runs' migration.
    """
    return getattr(row, "baseline_latency_us", None)


def timing_note(method: str | None) -> str | None:
    """What ``method`` is, for a hover (None without one)."""
    return TIMING_NOTES.get(method) if method else None


@dataclass(frozen=True)
class Progress:
    """How far a run is through its budget.

    A run stops at whichever of its budgets runs out first, so the bar shows the larger
    of the two fractions. A budget of seconds alone is stored with the server's trial cap
    (``max_trials``), which is no plan of the user's: such a run is shown by time only,
    never as ``8/10000 trials``.

    Attributes:
        pct: the bar's width (0-100).
        text: the short form the runs list shows (``8/32 trials``, ``12.0 s / 1 min 00 s``).
        trials_budget: the trial budget to show, or None when only time counts.
        seconds_budget: the time budget, or None.
        elapsed_s: seconds the run has run (None before it starts).
    """

    pct: float
    text: str
    trials_budget: int | None
    seconds_budget: float | None
    elapsed_s: float | None

    @classmethod
    def of(cls, run: RunModel, elapsed_s: float | None, max_trials: int) -> Progress:
        seconds = run.budget_seconds
        trials = None if seconds and run.budget_trials >= max_trials else run.budget_trials
        fractions = [run.trials_done / max(trials, 1)] if trials is not None else []
        parts = [f"{run.trials_done}/{trials} trials" if trials is not None
                 else f"{run.trials_done} trials"]
        if seconds:
            fractions.append((elapsed_s or 0.0) / seconds)
            parts.append(f"{duration_text(elapsed_s or 0.0)} / {duration_text(seconds)}")
        done = RunStatus(run.status) is RunStatus.SUCCEEDED
        pct = 100.0 if done else min(100.0, 100.0 * max(fractions))
        return cls(round(pct, 1), " · ".join(parts), trials, seconds, elapsed_s)


@dataclass(frozen=True)
class RunRow:
    """One run as the runs list and the run page's header show it."""

    id: int
    #: ``exact`` (one shape's best schedule) or ``range`` (a bucket table).
    kind: str
    op: str
    shape: str
    params: dict[str, Any]
    device: str
    simulated: bool
    status: str
    phase: str
    active: bool
    trials_done: int
    invalid: int
    progress: Progress
    best_latency_us: float | None
    best: str
    best_schedule_hash: str | None
    best_kernel_hash: str | None
    speedup: str
    #: Whether a baseline latency was measured (never on a simulated device).
    has_baseline: bool
    #: The stored baseline name (``cublas``) and as people know it (``cuBLAS``).
    baseline: str | None
    baseline_name: str | None
    baseline_latency: str
    #: Further peers re-timed with the winner (attention: FlashAttention-2): name ->
    #: (their latency, their latency over ours), as text.
    peers: dict[str, tuple[str, str]]
    #: How the GPU timed ours and the peers (``graph replay``, ``CUDA events``) and what
    #: that is; None on a simulated device, and before it is known.
    timed_by: str | None
    timing_note: str | None
    started: str
    started_short: str
    started_iso: str
    created: str
    finished: str
    duration_s: float | None
    duration: str
    stop_reason: str | None
    error: str | None
    cancel_requested: bool

    @classmethod
    def of(cls, run: RunModel, max_trials: int, now: dt.datetime | None = None) -> RunRow:
        """``run`` as shown at ``now``; ``max_trials`` is the server's trial cap (what a
        budget of seconds alone stores as its trials)."""
        status = RunStatus(run.status)
        started, finished = as_utc(run.started_at), as_utc(run.finished_at)
        duration: float | None = None
        if started is not None:
            end = finished or (None if status.is_finished() else (now or utcnow()))
            duration = (end - started).total_seconds() if end else run.elapsed_s
        baseline_us = vendor_baseline_us(run)
        return cls(
            id=run.id,
            kind=run.kind or "exact",
            op=run.workload.op,
            shape=shape_text(run.workload.op, run.workload.params),
            params=run.workload.params,
            device=run.device.name,
            simulated=run.device.simulated,
            status=run.status,
            phase=run.phase,
            active=not status.is_finished(),
            trials_done=run.trials_done,
            invalid=run.invalid,
            progress=Progress.of(run, duration, max_trials),
            best_latency_us=run.best_latency_us,
            best=latency_text(run.best_latency_us),
            best_schedule_hash=run.best_schedule_hash,
            best_kernel_hash=run.best_kernel_hash,
            speedup=speedup_text(run.best_latency_us, baseline_us),
            has_baseline=baseline_us is not None,
            baseline=getattr(run, "baseline", None),
            baseline_name=peer_name(getattr(run, "baseline", None)),
            baseline_latency=latency_text(baseline_us),
            peers={name: (latency_text(us), speedup_text(run.best_latency_us, us))
                   for name, us in (run.peer_latencies_us or {}).items()},
            timed_by=timing_method_text(getattr(run, "timing_method", None)),
            timing_note=timing_note(getattr(run, "timing_method", None)),
            started=time_text(started),
            started_short=short_time_text(started),
            started_iso=iso(started),
            created=time_text(run.created_at),
            finished=time_text(finished),
            duration_s=duration,
            duration=duration_text(duration),
            stop_reason=run.stop_reason,
            error=run.error,
            cancel_requested=run.cancel_requested,
        )


@dataclass(frozen=True)
class ScheduleRow:
    """One cache entry as the schedules page lists it."""

    id: int
    op: str
    shape: str
    device: str
    simulated: bool
    schedule_hash: str
    latency: str
    predicted: str
    speedup: str
    has_baseline: bool
    baseline_name: str | None
    #: How the GPU timed it and its baseline, as on a run (None: an estimate).
    timed_by: str | None
    kernel_hash: str | None
    run_id: int | None
    updated: str
    updated_short: str

    @classmethod
    def of(cls, row: Any) -> ScheduleRow:
        return cls(
            id=row.id,
            op=row.op,
            shape=shape_text(row.op, row.params),
            device=row.device,
            simulated=row.simulated,
            schedule_hash=row.schedule_hash,
            latency=latency_text(row.latency_us),
            predicted=latency_text(row.predicted_us),
            speedup=speedup_text(row.latency_us, vendor_baseline_us(row)),
            has_baseline=vendor_baseline_us(row) is not None,
            baseline_name=peer_name(getattr(row, "baseline", None)),
            timed_by=timing_method_text(getattr(row, "timing_method", None)),
            kernel_hash=row.kernel_hash,
            run_id=row.run_id,
            updated=time_text(row.updated_at),
            updated_short=short_time_text(row.updated_at),
        )


def key_choices_text(choices: dict[str, Any]) -> str:
    """The choices that tell two kernels of a range apart at a glance: the tile
    (``tile k64 m64 n128``), the stages of each ring and the swapped operands; the rest is
    on the range page's hover."""
    tile = [f"{k.removeprefix('tile_')}{v}" for k, v in sorted(choices.items())
            if k.startswith("tile_") and isinstance(v, int) and not isinstance(v, bool)]
    stages = [f"{k} {v}" for k, v in sorted(choices.items()) if k.startswith("stages")]
    parts = [("tile " + " ".join(tile)) if tile else "", *stages,
             "swap_ab" if choices.get("swap_ab") is True else ""]
    return " · ".join(part for part in parts if part) or "—"


@dataclass(frozen=True)
class RangeTableRow:
    """One tuned range as the ranges list and a range page's header show it."""

    id: int
    op: str
    #: The fixed parameters (``n=4096 k=4096 · fp16 · kn``) and the range (``m 1..16384``).
    fixed: str
    range: str
    device: str
    simulated: bool
    buckets: int
    loss: str
    sizes: list[int]
    size_from: str
    run_id: int | None
    created: str
    created_short: str
    #: How the GPU timed each sampled size (the exact workload's method there, the same
    #: for every bucket's kernel): size -> (``graph replay``, what that is). Empty on a
    #: simulated device and for tables from before it was recorded.
    timed_by: dict[int, tuple[str, str]]

    @classmethod
    def of(cls, row: RangeTableModel) -> RangeTableRow:
        ranged = [k for k, v in row.params.items() if isinstance(v, dict | list)]
        fixed = {k: v for k, v in row.params.items() if k not in ranged}
        return cls(
            id=row.id,
            op=row.op,
            fixed=shape_text(row.op, fixed),
            range=f"{' = '.join(ranged) or row.dim} {row.low}..{row.high}",
            device=row.device.name,
            simulated=row.simulated,
            buckets=len(row.buckets),
            loss=f"{row.loss:.3f}" if row.loss is not None else "—",
            sizes=list(row.sizes),
            size_from=f"{row.size_from[0]}, axis {row.size_from[1]}",
            run_id=row.run_id,
            created=time_text(row.created_at),
            created_short=short_time_text(row.created_at),
            timed_by={int(size): (timing_method_text(method) or method,
                                  timing_note(method) or "")
                      for bucket in row.buckets
                      for size, method in (bucket.get("timing_methods") or {}).items()},
        )


@dataclass(frozen=True)
class RangeBucketRow:
    """One bucket of a tuned range as its page shows it: the sizes it serves, its kernel,
    and that kernel's latency at each size the run sampled (``retimed`` where the final
    method re-timed it at the bucket's sizes)."""

    low: int
    high: int
    loss: str
    choices: str
    all_choices: str
    schedule_hash: str
    kernel_hash: str | None
    #: Per sampled size: its latency, its re-timed one or "", whether the bucket serves it.
    latencies: dict[int, tuple[str, str, bool]]

    @classmethod
    def of(cls, bucket: dict[str, Any]) -> RangeBucketRow:
        measured = {int(k): v for k, v in (bucket.get("latencies_us") or {}).items()}
        retimed = {int(k): v for k, v in (bucket.get("retimed_us") or {}).items()}
        choices = dict(bucket.get("choices") or {})
        return cls(
            low=bucket["low"],
            high=bucket["high"],
            loss=f"{bucket['loss']:.3f}",
            choices=key_choices_text(choices),
            all_choices=" ".join(f"{k}={v}" for k, v in sorted(choices.items())),
            schedule_hash=bucket["schedule_hash"],
            kernel_hash=bucket.get("kernel_hash"),
            latencies={size: (latency_text(us),
                              latency_text(retimed[size]) if size in retimed else "",
                              bucket["low"] <= size <= bucket["high"])
                       for size, us in sorted(measured.items())},
        )


def matches_shape(query: str, op: str, params: dict[str, Any]) -> bool:
    """Whether every word of ``query`` is in the entry's shape: ``m=4096`` matches that
    size exactly, a bare word (``4096``, ``fp16``, ``causal``) any part of it."""
    text = shape_text(op, params)
    sizes = {f"{k}={v}".lower() for k, v in params.items()}
    parts = set(text.lower().replace("·", " ").split())
    for word in query.lower().split():
        if "=" in word:
            if word not in sizes:
                return False
        elif not any(word in part for part in parts | sizes):
            return False
    return True
