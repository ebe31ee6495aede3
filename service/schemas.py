"""Request and response schemas of the API, per entity (Create / Public / list envelope).

Requests are strict: no coercion of ``"64"`` to ``64``, no unknown fields. A list comes
in an envelope ``{"data": [...], "count": n}`` where ``count`` is the total matching rows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError
from sqlalchemy.orm import object_session

from scheduler_search.ops import SpecError
from scheduler_search.ops.aliases import expand_aliases
from service.db.models import (
    DeviceModel,
    KernelModel,
    RangeTableModel,
    RunKind,
    RunModel,
    ScheduleModel,
    TrialModel,
    WorkloadModel,
    as_utc,
)
from service.db.ranges import range_table_of_run
from service.db.repositories import redact_owner

if TYPE_CHECKING:
    from service.runs.ranges import RangeServed

#: Request limits: a budget above these is a typo, not a plan.
MAX_TRIALS = 10_000
MAX_SECONDS = 86_400.0
#: ... and below this one: a search round alone takes longer.
MIN_SECONDS = 1.0
MAX_NAME = 64


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# ----- tune -------------------------------------------------------------------------------------
class BudgetIn(_Strict):
    """What a run may spend: measured trials and/or wall-clock seconds."""

    trials: int | None = Field(default=None, ge=1, le=MAX_TRIALS)
    seconds: float | None = Field(default=None, ge=MIN_SECONDS, le=MAX_SECONDS,
                                  allow_inf_nan=False)


class TuneBudgetIn(BudgetIn):
    """A tune's budget: also when to give up on a search that stopped improving."""

    patience: int | None = Field(
        default=None, ge=1, le=MAX_TRIALS,
        description="Stop after this many measured trials in a row without a new best "
        "(default: the server's PIPETUNE_DEFAULT_PATIENCE; not for a range run, nor "
        "with `extend`, which continues a run with its own).")


class TuneRequest(_Strict):
    """Body of ``POST /v1/tune``: an operator spec, the device, the budget."""

    op: str = Field(min_length=1, max_length=MAX_NAME, examples=["gemm"])
    params: dict[str, Any] = Field(
        examples=[{"m": 4096, "n": 4096, "k": 4096, "dtype": "float16"},
                  {"m": {"min": 1, "max": 16384}, "n": 4096, "k": 4096, "dtype": "float16"}],
        description="The operator's parameters: `GET /v1/ops` gives each operator's JSON "
        "schema (types, ranges, defaults). A GEMM's `m` may be a range, `{\"min\": 1, "
        "\"max\": 16384}`, or a list of sizes: a range run, whose answer is a bucket table "
        "(`range`; docs/dynamic.md). The command line's shorthands work here too: a dtype "
        "`fp16`, `bf16`, `fp8`, and attention's `seq` for both `seq_q` and `seq_kv`.",
    )
    device: str = Field(default="auto", min_length=1, max_length=MAX_NAME, examples=["sim:h200"])
    budget: TuneBudgetIn = Field(default_factory=TuneBudgetIn)
    force: bool = Field(default=False, description="Tune even when the cache holds the "
                        "workload: a new run (the cache keeps the faster schedule).")
    extend: bool = Field(default=False, description="Continue the workload's newest run on "
                         "the device (its study and trials; none is measured again) with "
                         "`budget` more; a new run if there is none.")

    @model_validator(mode="after")
    def _expand_shorthands(self) -> TuneRequest:
        """The command line's shorthands (``fp16``, attention's ``seq``;
        ``scheduler_search.ops.aliases``) as the spec's own parameters, so that both
        spellings are one workload; a shorthand beside a parameter it sets is an error
        under ``params.<shorthand>``."""
        try:
            self.params = expand_aliases(self.op, self.params)
        except SpecError as error:
            raise ValidationError.from_exception_data(type(self).__name__, [InitErrorDetails(
                type=PydanticCustomError("spec_error", error.message),
                loc=("params", error.field), input=self.params.get(error.field))]) from None
        return self


class ResumeRequest(_Strict):
    """Body of ``POST /v1/runs/{id}/resume`` (optional): ``budget`` more than the run has
    done; without it the run's own budget."""

    budget: BudgetIn | None = None


class OperatorPublic(BaseModel):
    """An operator a tune may name (``GET /v1/ops``)."""

    op: str
    summary: str
    parameters: dict[str, Any] = Field(description="JSON schema of the operator's `params`.")
    required: list[str]
    baseline: str | None = Field(description="The vendor peer a GPU run compares with.")
    peers: list[str] = Field(description="Further peers timed with the finalists.")
    generates_cuda: bool = Field(description="Whether a run on a GPU measures kernels "
                                 "generated for it (else only the simulated device answers).")
    kernels: list[str] = Field(default_factory=list, description="For a pipeline (an "
                               "operator run as a sequence of kernels, e.g. `mamba2_ssd`), "
                               "the operators of the kernels its plans may run; a tune "
                               "tunes each of them.")


class OperatorsPublic(BaseModel):
    data: list[OperatorPublic]
    count: int


# ----- shared parts -------------------------------------------------------------------------------
class WorkloadPublic(BaseModel):
    """An operator spec as stored: op, validated params, key (sha256 of canonical JSON)."""

    key: str
    op: str
    params: dict[str, Any]

    @classmethod
    def of(cls, row: WorkloadModel) -> WorkloadPublic:
        return cls(key=row.key, op=row.op, params=row.params)


class BudgetPublic(BaseModel):
    trials: int
    seconds: float | None
    patience: int | None


def speedup(baseline_us: float | None, latency_us: float | None) -> float | None:
    """Baseline latency / pipetune latency (> 1: pipetune is faster), or None."""
    if not baseline_us or not latency_us:
        return None
    return baseline_us / latency_us


#: The GPU's two timing methods (``scheduler_search.search.presets``' ``EVENTS`` and
#: ``GRAPH``, chosen per workload by ``timing_method``) in a few words: what the CLI and the
#: dashboard say beside a latency or a speedup.
TIMING_METHOD_TEXT = {"events": "CUDA events", "graph": "graph replay"}
_TIMING_METHODS = (
    "`events` (per-launch CUDA events, the L2 flushed before each: long kernels) or `graph` "
    "(many launches replayed from a CUDA graph over operand copies larger than the L2: short "
    "or memory-bound kernels, timed as a model's step runs them), chosen per workload; the "
    "two give different figures for one kernel, so a latency and a speedup are read with it"
)


def timing_method_text(method: str | None) -> str | None:
    """``graph replay`` / ``CUDA events`` for a stored timing method (None without one)."""
    return TIMING_METHOD_TEXT.get(method, method) if method else None


def _single_method(methods: dict[str, str] | None) -> str | None:
    """The one method every size of ``methods`` was timed by, or None (none, or mixed)."""
    found = set((methods or {}).values())
    return found.pop() if len(found) == 1 else None


class BestPublic(BaseModel):
    """The best schedule of a run so far (after re-timing once it succeeded)."""

    latency_us: float
    schedule_hash: str
    kernel_hash: str | None
    simulated: bool


# ----- runs ---------------------------------------------------------------------------------------
def waiting_reason(run: RunModel, served: Collection[str] | None) -> str | None:
    """What a queued run waits for when no live process serves its device."""
    if served is None or run.status != "queued" or run.device.key in served:
        return None
    return (f"waiting for a device of this kind: no running pipetune process serves "
            f"{run.device.name} (device key {run.device.key[:12]}...); start one where it is "
            "(pipetune worker or pipetune serve on that machine)")


class RunPublic(BaseModel):
    """A tuning run as the API shows it. On a GPU, ``baseline`` is the vendor peer timed
    by the same worker (``cublas`` for a GEMM, ``sdpa_cudnn`` for attention,
    ``mamba_ssm_chunk_state`` / ``mamba_ssm_chunk_scan`` for Mamba2),
    ``baseline_latency_us`` its latency and ``speedup_vs_baseline`` its latency over the
    best kernel's (> 1: faster than it). A finished run with ``baseline`` set and both
    figures null has no baseline: the peer could not be measured (e.g. unavailable on the
    worker), which never fails the run. ``peers`` are the further peers re-timed with the
    finalists, by name, with their latency in us (``sdpa_flash``, FlashAttention-2, for
    attention; only those timed successfully; empty when none), and
    ``speedups_vs_peers`` each one's latency over the best kernel's (empty without a
    best)."""

    id: int
    kind: str = Field(default="exact", description="`exact`: the run looks for one shape's "
                      "best schedule; `range`: for a bucket table over a range "
                      "(`range_id`).")
    range_id: int | None = Field(default=None, description="A range run's bucket table "
                                 "(`GET /v1/ranges/{id}`; one kernel per bucket, so `best` "
                                 "stays null); null until the run stores it, and for an "
                                 "exact run.")
    status: str
    phase: str
    workload: WorkloadPublic
    device: str
    device_key: str
    simulated: bool
    budget: BudgetPublic
    trials_done: int
    invalid: int
    best: BestPublic | None
    baseline: str | None = None
    baseline_latency_us: float | None = None
    speedup_vs_baseline: float | None = None
    peers: dict[str, float] = Field(default_factory=dict)
    speedups_vs_peers: dict[str, float] = Field(default_factory=dict)
    timing_method: str | None = Field(
        default=None, description="How the GPU timed the run's kernels and peers, so "
        "`best.latency_us`, `baseline_latency_us`, `peers` and the speedups: "
        f"{_TIMING_METHODS}. Null on a simulated device (estimates), until a GPU run's "
        "baseline is first timed, and for runs from before pipetune recorded it.")
    stop_reason: str | None
    error: str | None
    cancel_requested: bool
    attempts: int
    key_id: int | None = Field(default=None, description="The API key that made the run "
                               "(null: made without a key); it and admin keys may cancel "
                               "or resume it.")
    elapsed_s: float
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    waiting: str | None = Field(default=None, description="Why a queued run has not "
                                "started: no live pipetune process serves its device "
                                "(null when one does, or the run is not queued).")

    @classmethod
    def of(cls, run: RunModel, served: Collection[str] | None = None) -> RunPublic:
        """``served``: the device keys live processes serve (None: not checked)."""
        best = None
        if run.best_latency_us is not None and run.best_schedule_hash is not None:
            best = BestPublic(
                latency_us=run.best_latency_us,
                schedule_hash=run.best_schedule_hash,
                kernel_hash=run.best_kernel_hash,
                simulated=bool(run.best_simulated),
            )
        peers = {name: float(us) for name, us in (run.peer_latencies_us or {}).items()}
        speedups = {name: speedup(us, run.best_latency_us) for name, us in peers.items()}
        return cls(
            id=run.id,
            kind=run.kind or "exact",
            range_id=_range_id(run),
            status=run.status,
            phase=run.phase,
            workload=WorkloadPublic.of(run.workload),
            device=run.device.name,
            device_key=run.device.key,
            simulated=run.device.simulated,
            budget=BudgetPublic(
                trials=run.budget_trials, seconds=run.budget_seconds, patience=run.patience
            ),
            trials_done=run.trials_done,
            invalid=run.invalid,
            best=best,
            baseline=run.baseline,
            baseline_latency_us=run.baseline_latency_us,
            speedup_vs_baseline=speedup(run.baseline_latency_us, run.best_latency_us),
            peers=peers,
            speedups_vs_peers={name: x for name, x in speedups.items() if x is not None},
            timing_method=run.timing_method,
            stop_reason=run.stop_reason,
            error=redact_owner(run.error),
            cancel_requested=run.cancel_requested,
            attempts=run.attempts,
            key_id=run.key_id,
            elapsed_s=run.elapsed_s,
            created_at=as_utc(run.created_at),
            started_at=as_utc(run.started_at),
            finished_at=as_utc(run.finished_at),
            waiting=waiting_reason(run, served),
        )


def _range_id(run: RunModel) -> int | None:
    """The bucket table a range run stored, read in the run row's own session."""
    session = object_session(run)
    if run.kind != RunKind.RANGE.value or session is None:
        return None
    table = range_table_of_run(session, run_id=run.id)
    return table.id if table is not None else None


class RunsPublic(BaseModel):
    data: list[RunPublic]
    count: int


# ----- trials -------------------------------------------------------------------------------------
class TrialPublic(BaseModel):
    """One trial: the search choices, its schedule, status, latency, error."""

    number: int
    status: str
    source: str
    params: dict[str, Any]
    schedule_hash: str | None
    latency_us: float | None
    predicted_us: float | None
    simulated: bool
    error: str | None
    created_at: dt.datetime

    @classmethod
    def of(cls, row: TrialModel) -> TrialPublic:
        return cls(
            number=row.number,
            status=row.status,
            source=row.source,
            params=row.choices,
            schedule_hash=row.schedule_hash,
            latency_us=row.latency_us,
            predicted_us=row.predicted_us,
            simulated=row.simulated,
            error=row.error or None,
            created_at=as_utc(row.created_at),
        )


class TrialsPublic(BaseModel):
    data: list[TrialPublic]
    count: int


# ----- schedules ----------------------------------------------------------------------------------
class SchedulePublic(BaseModel):
    """A cached best schedule of a workload on a device. ``id`` names the cache entry
    (``/v1/schedules/{id}/timeline``); ``run_id`` the run that found it (null when it was
    imported). On a GPU, ``kernel_hash`` names its kernel (``/v1/kernels/{kernel_hash}``)
    and the baseline fields compare it with the vendor peer, as on a run.

    A schedule served from a tuned range (an exact size inside it, with no exact schedule
    cached) has ``id`` null and ``range_id`` naming the table: the bucket's schedule (its
    sProgram planned at the range's high end, taking the size at run time), its kernel
    bound to the size, and ``latency_us`` interpolated between the sizes the range run
    measured that kernel at."""

    id: int | None
    workload: WorkloadPublic
    device: str
    device_key: str
    schedule_hash: str
    latency_us: float
    predicted_us: float | None
    simulated: bool
    kernel_hash: str | None
    baseline: str | None = None
    baseline_latency_us: float | None = None
    speedup_vs_baseline: float | None = None
    timing_method: str | None = Field(
        default=None, description="How the GPU timed `latency_us` and "
        f"`baseline_latency_us`: {_TIMING_METHODS}. Served from a range: the method of "
        "the bucket's measured sizes, when one timed them all. Null on a simulated device "
        "(estimates) and for entries from before pipetune recorded it.")
    run_id: int | None
    choices: dict[str, Any]
    schedule: dict[str, Any]
    updated_at: dt.datetime
    range_id: int | None = None

    @classmethod
    def of_range(cls, served: RangeServed) -> SchedulePublic:
        """The schedule that serves an exact size from a tuned range."""
        table, bucket, spec = served.table, served.bucket, served.spec
        return cls(
            id=None,
            workload=WorkloadPublic(key=spec.workload_key(), op=spec.op, params=spec.params()),
            device=table.device.name,
            device_key=table.device.key,
            schedule_hash=bucket["schedule_hash"],
            latency_us=served.latency_us if served.latency_us is not None else 0.0,
            predicted_us=None,
            simulated=table.simulated,
            kernel_hash=served.kernel_hash,
            timing_method=_single_method(bucket.get("timing_methods")),
            run_id=table.run_id,
            choices=dict(bucket.get("choices") or {}),
            schedule=dict(bucket.get("schedule") or {}),
            updated_at=as_utc(table.created_at),
            range_id=table.id,
        )

    @classmethod
    def of(cls, row: ScheduleModel) -> SchedulePublic:
        return cls(
            id=row.id,
            workload=WorkloadPublic.of(row.workload),
            device=row.device.name,
            device_key=row.device.key,
            schedule_hash=row.schedule_hash,
            latency_us=row.latency_us,
            predicted_us=row.predicted_us,
            simulated=row.simulated,
            kernel_hash=row.kernel_hash,
            baseline=row.baseline,
            baseline_latency_us=row.baseline_latency_us,
            speedup_vs_baseline=speedup(row.baseline_latency_us, row.latency_us),
            timing_method=row.timing_method,
            run_id=row.run_id,
            choices=row.choices,
            schedule=row.schedule,
            updated_at=as_utc(row.updated_at),
        )


class SchedulesPublic(BaseModel):
    data: list[SchedulePublic]
    count: int


# ----- tuned ranges -------------------------------------------------------------------------------
class RangeBucketPublic(BaseModel):
    """Sizes ``low``..``high`` of a tuned range served by one kernel that takes the size at
    run time: ``loss`` times the best kernel measured at the bucket's sampled sizes
    (``samples``); ``latencies_us`` the kernel's latency at every size the run sampled
    (keyed by the size), ``retimed_us`` at the bucket's sizes by the final method (null:
    not re-timed). ``kernel_hash`` names its kernel (null without code generation);
    ``schedule`` is its sProgram (in a single table's answer; null in a list)."""

    low: int
    high: int
    loss: float
    samples: list[int]
    schedule_hash: str
    kernel_hash: str | None
    choices: dict[str, Any]
    latencies_us: dict[str, float]
    retimed_us: dict[str, float] | None
    timing_methods: dict[str, str] | None = Field(
        default=None, description="How the GPU timed the kernel at each size, keyed as "
        f"`latencies_us` (the exact workload's method at that size): {_TIMING_METHODS}. "
        "Null on a simulated device (estimates) and for tables from before pipetune "
        "recorded it.")
    schedule: dict[str, Any] | None = None

    @classmethod
    def of(cls, bucket: dict[str, Any], with_schedule: bool) -> RangeBucketPublic:
        return cls(
            low=bucket["low"], high=bucket["high"], loss=bucket["loss"],
            samples=list(bucket.get("samples") or []),
            schedule_hash=bucket["schedule_hash"], kernel_hash=bucket.get("kernel_hash"),
            choices=dict(bucket.get("choices") or {}),
            latencies_us=dict(bucket.get("latencies_us") or {}),
            retimed_us=bucket.get("retimed_us"),
            timing_methods=bucket.get("timing_methods"),
            schedule=bucket.get("schedule") if with_schedule else None,
        )


class RangeTablePublic(BaseModel):
    """A tuned range (``GET /v1/ranges/{id}``): contiguous buckets of ``dim`` covering
    ``low``..``high`` of the workload ``params`` on a device. ``loss`` is the table's
    served-to-best ratio over the sampled sizes (geometric mean; 1.0: every sampled size
    served by the best candidate measured there); ``sizes`` the sizes the run measured
    at; ``size_from`` the input tensor and axis a call's size is read from;
    ``artifact_available`` whether every bucket has a kernel
    (``GET /v1/ranges/{id}/artifact``)."""

    id: int
    op: str
    params: dict[str, Any]
    dim: str
    low: int
    high: int
    device: str
    device_key: str
    simulated: bool
    run_id: int | None
    loss: float | None
    sizes: list[int]
    size_from: list[Any]
    artifact_available: bool
    buckets: list[RangeBucketPublic]
    created_at: dt.datetime

    @classmethod
    def of(cls, row: RangeTableModel, with_schedules: bool = True) -> RangeTablePublic:
        return cls(
            id=row.id, op=row.op, params=row.params, dim=row.dim, low=row.low, high=row.high,
            device=row.device.name, device_key=row.device.key, simulated=row.simulated,
            run_id=row.run_id, loss=row.loss, sizes=list(row.sizes),
            size_from=list(row.size_from),
            artifact_available=all(b.get("kernel_hash") for b in row.buckets),
            buckets=[RangeBucketPublic.of(b, with_schedules) for b in row.buckets],
            created_at=as_utc(row.created_at),
        )


class RangeTablesPublic(BaseModel):
    data: list[RangeTablePublic]
    count: int


# ----- tune answer -------------------------------------------------------------------------------
class PipelineKernelPublic(BaseModel):
    """One kernel of a pipeline: its ``role`` there, its workload, the run that tunes it
    (or found its cached schedule) and its cached ``schedule`` (null until stored)."""

    role: str
    op: str
    params: dict[str, Any]
    run: RunPublic | None
    schedule: SchedulePublic | None


class PipelinePlanPublic(BaseModel):
    """A plan of a pipeline: the roles of its kernels in order, and their cost per call."""

    kernels: list[str]
    latency_us: float | None


class PipelinePublic(BaseModel):
    """A pipeline (an operator that runs as a sequence of kernels, e.g. ``mamba2_ssd``) on
    a device: its kernels, and ``plans``, each plan's kernels in order with what they cost
    per call from their cached latencies (null while one is not measured). ``plan`` is the
    plan served: the cheapest measured one (null until every kernel of a plan is cached),
    ``latency_us`` its cost."""

    op: str
    params: dict[str, Any]
    device: str
    plan: str | None
    latency_us: float | None
    plans: dict[str, PipelinePlanPublic]
    kernels: list[PipelineKernelPublic]


class TuneResponse(BaseModel):
    """``POST /v1/tune``'s answer, one shape for 200 (a cache hit) and 202 (a run).

    ``run`` is the run that found the schedule (a hit) or that will find it (its ``id``
    is what ``/v1/runs/{id}`` and ``/v1/runs/{id}/events`` take); it is null only for a
    cached schedule imported from another cache (``pipetune cache import``). ``schedule``
    is the cached best schedule, null while a run is still to find it. For a range
    request, ``range`` is the tuned range that covers it (a hit; null while a run is still
    to tune it) and ``schedule`` is null; an exact size inside a tuned range, with no
    exact schedule cached, is a hit whose ``schedule`` the range serves (its
    ``range_id`` set).
    A pipeline's answer (``mamba2_ssd``) has ``pipeline``: its kernels, each with the run
    that tunes it and its cached schedule, and the plan served; ``run`` is then the first
    kernel's run still to finish (null on a hit) and ``schedule`` null."""

    cached: bool
    run: RunPublic | None
    schedule: SchedulePublic | None
    range: RangeTablePublic | None = None
    pipeline: PipelinePublic | None = None


# ----- kernels ------------------------------------------------------------------------------------
class KernelArtifactPublic(BaseModel):
    """A generated kernel: the KernelArtifact JSON (launch contract) and its hashes."""

    hash: str
    schedule_hash: str
    artifact: dict[str, Any]

    @classmethod
    def of(cls, row: KernelModel) -> KernelArtifactPublic:
        return cls(hash=row.hash, schedule_hash=row.schedule_hash, artifact=row.artifact)


# ----- devices ------------------------------------------------------------------------------------
class DevicePublic(BaseModel):
    """A device: its name for requests, its cache key, whether it is simulated, whether
    runs have used it, and the executor measuring it (when one is open)."""

    name: str
    key: str
    kind: str
    simulated: bool
    available: bool
    known: bool
    executor: str | None = None
    capacity: int | None = None
    #: A fleet device's executor: what measuring through Ray has cost beyond the GPUs'
    #: own measuring (chunks, seconds of round trip and of measuring, overhead per chunk).
    dispatch: dict[str, float] | None = None
    identity: dict[str, Any]

    @classmethod
    def of_row(cls, row: DeviceModel, available: bool) -> DevicePublic:
        return cls(
            name=row.name,
            key=row.key,
            kind=row.kind,
            simulated=row.simulated,
            available=available,
            known=True,
            identity=row.identity,
        )


class DevicesPublic(BaseModel):
    data: list[DevicePublic]
    count: int


# ----- dashboard: convergence, parameter importance, timeline ----------------------------------
class TrialSeriesPublic(BaseModel):
    """Trials as columns (compact for charts): number, seconds since the run started,
    latency (null where none was measured) and status."""

    number: list[int]
    t_s: list[float]
    latency_us: list[float | None]
    status: list[str]


class ConvergencePublic(BaseModel):
    """A run's convergence: its trials (every one, or a sample when there are more than
    ``max_points``; every improvement is kept) and the best-so-far steps."""

    run_id: int
    count: int
    measured: int
    downsampled: bool
    statuses: dict[str, int]
    trials: TrialSeriesPublic
    best: TrialSeriesPublic


class ImportanceItem(BaseModel):
    param: str
    importance: float


class ImportancePublic(BaseModel):
    """How much each search choice explains the measured latency (sums to 1), once the run
    has ``min_trials`` measured trials; ``reason`` says why not otherwise."""

    run_id: int
    available: bool
    reason: str | None
    method: str | None
    complete_trials: int
    min_trials: int
    data: list[ImportanceItem]


class TimelineEntryPublic(BaseModel):
    """One sTask instance on one sEU, in microseconds from the block's start."""

    unit: str
    stask: str
    role: str
    iteration: int
    start_us: float
    end_us: float


class TimelinePublic(BaseModel):
    """The cost model's per-sEU timeline of one block of a schedule, with its estimate."""

    schedule_hash: str
    op: str
    device: str
    predicted_us: float = Field(description="The schedule's latency by the cost model: on a "
                                "simulated device the figure its runs report.")
    calibrated: bool = Field(default=False, description="Whether the cost model is "
                             "calibrated on the GPU's measurements (sim:h200 GEMMs: the "
                             "calibration pipetune ships), timeline included.")
    bound: str
    compute_us: float
    dram_us: float
    tile_us: float
    tiles: int
    unit_utilisation: dict[str, float]
    lanes: list[str]
    mapping: dict[str, str]
    stages: dict[str, int]
    roles: dict[str, Any]
    tile: dict[str, int]
    entries: list[TimelineEntryPublic]


# ----- errors and health --------------------------------------------------------------------------
class ErrorItem(BaseModel):
    """One problem with a request: where (``loc``, and ``field`` as a dotted path), what."""

    loc: list[str | int]
    field: str
    msg: str
    type: str


class ErrorPublic(BaseModel):
    detail: list[ErrorItem] | str


#: The answers of a route that needs an API key (documented in OpenAPI).
AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorPublic, "description": "No API key, or one that is not valid "
          "(`WWW-Authenticate: Bearer`)."},
    403: {"model": ErrorPublic, "description": "The key lacks the scope, or the run is "
          "another key's."},
    429: {"model": ErrorPublic, "description": "A rate limit or queue quota is reached; "
          "`Retry-After` says when to try again, `field` which."},
}


class HealthPublic(BaseModel):
    status: str
    database: str
    schema_version: str | None
    runs_active: int
    version: str
