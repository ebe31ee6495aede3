"""Plain data exchanged with GPU workers: jobs in, measurements out.

Everything here is JSON-serialisable and versioned, because a job crosses a process
boundary (a pipe to the worker) and a measurement is stored by the service. No GPU
import happens in this module.
"""

from __future__ import annotations

import enum
import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from codegen.artifact import KernelArtifact
from scheduler_search.canonical import canonical_json
from scheduler_search.ops import TensorSpec

PROTOCOL_VERSION = 1


class MeasurementStatus(enum.StrEnum):
    """Outcome of measuring one candidate.

    Attributes:
        OK: compiled, launched, matched the reference and was timed.
        COMPILE_ERROR: NVRTC rejected the source; ``Measurement.log`` holds its log.
        LAUNCH_ERROR: the kernel could not be launched (bad launch contract, too many
            resources, missing entry point); the worker and its GPU context are fine.
        WRONG_RESULT: the output differs from the reference beyond the dtype's bound
            (or holds NaN / unwritten elements).
        TIMEOUT: the candidate ran past its deadline; its worker was killed and respawned.
        CRASH: a sticky CUDA error (illegal address, ...) or the worker died; only that
            worker was restarted.
    """

    OK = "ok"
    COMPILE_ERROR = "compile_error"
    LAUNCH_ERROR = "launch_error"
    WRONG_RESULT = "wrong_result"
    TIMEOUT = "timeout"
    CRASH = "crash"

    def is_ok(self) -> bool:
        return self is MeasurementStatus.OK


#: Per-launch samples between CUDA events, the L2 flushed before each.
EVENTS = "events"
#: Samples of a CUDA graph's replay over rotating operand copies (``workers.graph_timing``).
GRAPH = "graph"
TIMING_METHODS = (EVENTS, GRAPH)


@dataclass(frozen=True)
class TimingConfig:
    """How a kernel is timed.

    ``method`` ``"events"`` (:data:`EVENTS`): warm-up, then per-launch CUDA events with an
    L2 flush between (long kernels, whose sample overhead is lost in them). ``"graph"``
    (:data:`GRAPH`): launches replayed from a CUDA graph over rotating operand copies larger
    than the L2, each sample a replay of at least ``replay_us`` divided by its launches
    (short kernels: ``workers.graph_timing``). Sampling stops once both ``min_samples``
    samples and ``min_time_ms`` of wall time are reached, or at ``max_samples``. Before each
    sample the GPU also waits ``host_lead_us`` on a spin kernel, long enough for the host to
    enqueue the timed launch (or replay) behind it: the sample is the
    kernel's GPU time, not the host's launch cost (a peer's launch through PyTorch can take
    longer than a small kernel runs).
    """

    warmup_launches: int = 3
    warmup_ms: float = 20.0
    min_samples: int = 20
    min_time_ms: float = 100.0
    max_samples: int = 400
    flush_l2: bool = True
    host_lead_us: float = 200.0
    method: str = EVENTS
    replay_us: float = 500.0

    def __post_init__(self) -> None:
        if self.method not in TIMING_METHODS:
            raise ValueError(f"timing method {self.method!r} is not one of {TIMING_METHODS}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TimingConfig:
        return cls(**data)


@dataclass(frozen=True)
class Job:
    """One candidate to measure: a kernel (or a named peer baseline) on one workload.

    Exactly one of ``artifact``, ``schedule`` and ``baseline`` is set. ``schedule`` is an
    sProgram's ``to_dict()``: what the simulated device measures (through the cost model)
    before code generation exists for it. ``workload`` is
    ``{"op": str, "params": dict}`` with the operator spec's fields; ``seed`` picks the
    random inputs; ``deadline_s`` bounds load + verify + timing on the GPU. ``tensors`` is
    the workload's tensor contract (``OperatorSpec.tensors()``) that the worker builds,
    checks and launches by; a job without it (an older caller's, a bench script's, a
    simulated one) has the worker derive it from ``workload``
    (``workers.contract.contract``).
    """

    workload: dict[str, Any]
    artifact: KernelArtifact | None = None
    baseline: str | None = None
    schedule: dict[str, Any] | None = None
    seed: int = 0
    timing: TimingConfig = field(default_factory=TimingConfig)
    deadline_s: float = 60.0
    tensors: tuple[TensorSpec, ...] | None = None

    def __post_init__(self) -> None:
        given = [x for x in (self.artifact, self.schedule, self.baseline) if x is not None]
        if len(given) != 1:
            raise ValueError("a Job needs exactly one of artifact, schedule and baseline")
        if set(self.workload) != {"op", "params"}:
            raise ValueError("workload must be {'op': ..., 'params': {...}}")

    @property
    def label(self) -> str:
        """Short name for logs: the schedule hash or the baseline name."""
        if self.artifact is not None:
            return self.artifact.schedule_hash or self.artifact.entry
        if self.schedule is not None:
            return f"schedule:{self.schedule.get('op', '?')}"
        return f"baseline:{self.baseline}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": PROTOCOL_VERSION,
            "workload": json.loads(json.dumps(self.workload)),
            "artifact": self.artifact.to_dict() if self.artifact is not None else None,
            "baseline": self.baseline,
            "schedule": (
                json.loads(json.dumps(self.schedule)) if self.schedule is not None else None
            ),
            "seed": self.seed,
            "timing": self.timing.to_dict(),
            "deadline_s": self.deadline_s,
            "tensors": (
                [t.to_dict() for t in self.tensors] if self.tensors is not None else None
            ),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Job:
        _check_version("Job", data)
        artifact = data.get("artifact")
        tensors = data.get("tensors")
        return cls(
            workload=dict(data["workload"]),
            artifact=KernelArtifact.from_dict(artifact) if artifact is not None else None,
            baseline=data.get("baseline"),
            schedule=dict(data["schedule"]) if data.get("schedule") is not None else None,
            seed=int(data.get("seed", 0)),
            timing=TimingConfig.from_dict(data.get("timing", {})),
            deadline_s=float(data.get("deadline_s", 60.0)),
            tensors=(
                tuple(TensorSpec.from_dict(t) for t in tensors) if tensors is not None else None
            ),
        )


@dataclass(frozen=True)
class Measurement:
    """What a worker reports for one Job.

    Latencies are in microseconds per launch; ``latency_us`` is the median of
    ``samples_us``, ``iqr_us`` its interquartile range. ``rel_error`` is
    ``‖out − ref‖ / ‖ref‖`` (NaN if the output held NaN). ``registers``, ``spill_bytes``
    (local memory per thread) and ``smem_bytes`` (static + dynamic shared memory per block)
    are read from the loaded function. ``simulated`` is true only for results that no GPU
    produced (the cost-model executor). ``timing_method`` is the job's
    ``TimingConfig.method`` the latencies were taken by (``None``: not timed).
    """

    status: MeasurementStatus
    latency_us: float | None = None
    samples_us: tuple[float, ...] = ()
    iqr_us: float | None = None
    min_us: float | None = None
    max_us: float | None = None
    rel_error: float | None = None
    error_bound: float | None = None
    compile_ms: float | None = None
    compile_cached: bool = False
    registers: int | None = None
    spill_bytes: int | None = None
    smem_bytes: int | None = None
    verify_wall_ms: float | None = None
    timing_wall_ms: float | None = None
    error: str = ""
    log: str = ""
    simulated: bool = False
    device_index: int | None = None
    timing_method: str | None = None
    version: int = PROTOCOL_VERSION

    @classmethod
    def from_samples(cls, samples_us: list[float], **fields: Any) -> Measurement:
        """An ``ok`` measurement whose median and spread come from ``samples_us``."""
        stats = summarize_samples(samples_us)
        return cls(status=MeasurementStatus.OK, samples_us=tuple(samples_us), **stats, **fields)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        data["samples_us"] = list(self.samples_us)
        if self.rel_error is not None and not math.isfinite(self.rel_error):
            data["rel_error"] = str(self.rel_error)  # JSON has no NaN / inf
        return data

    def to_json(self) -> str:
        return canonical_json(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        _check_version("Measurement", data)
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in known}
        values["status"] = MeasurementStatus(values["status"])
        values["samples_us"] = tuple(float(s) for s in values.get("samples_us", ()))
        if isinstance(values.get("rel_error"), str):
            values["rel_error"] = float(values["rel_error"])
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> Measurement:
        return cls.from_dict(json.loads(text))


def summarize_samples(samples_us: list[float]) -> dict[str, float]:
    """Median, interquartile range, min and max of a list of latencies."""
    if not samples_us:
        raise ValueError("no samples")
    ordered = sorted(samples_us)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    return {
        "latency_us": statistics.median(ordered),
        "iqr_us": q3 - q1,
        "min_us": ordered[0],
        "max_us": ordered[-1],
    }


def _check_version(kind: str, data: dict[str, Any]) -> None:
    version = data.get("version", PROTOCOL_VERSION)
    if version != PROTOCOL_VERSION:
        raise ValueError(f"{kind} protocol version {version} is not {PROTOCOL_VERSION}")
