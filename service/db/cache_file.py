"""The cache as a JSON file, to carry it between machines and databases, as Kernel
Tuner's cache files and TVM's tuning records are carried (``pipetune cache export`` /
``pipetune cache import``).

The file holds the workloads, the devices (by fingerprint key, as the cache keys them),
the best schedule of each (workload, device) with its kernel, and the tuned ranges
(``pipetune_range_tables``, docs/dynamic.md) with their buckets' kernels::

    {"format": "pipetune-cache", "version": 2, "exported_at": "...",
     "workloads": [{"key", "op", "params"}],
     "devices": [{"key", "name", "kind", "simulated", "identity"}],
     "schedules": [{"workload", "device", "schedule_hash", "schedule", "choices",
                    "latency_us", "predicted_us", "simulated", "baseline",
                    "baseline_latency_us", "timing_method",
                    "kernel": {"hash", "schedule_hash", "artifact"} | null}],
     "ranges": [{"device", "op", "fixed_key", "dim", "low", "high", "params",
                 "size_from", "sizes", "loss", "simulated",
                 "buckets": [{"low", "high", "loss", "samples", "schedule_hash",
                              "kernel_hash", "source", "choices", "schedule",
                              "latencies_us", "retimed_us", "timing_methods"}],
                 "kernels": [{"hash", "schedule_hash", "artifact"}]}]}

``timing_method`` (a schedule's) and ``timing_methods`` (a bucket's, per size) say how a
GPU timed the latencies: ``events`` or ``graph`` (``TimingMethod``); they are optional,
null on a simulated device and absent from files written before pipetune recorded them.
Version 1 files (before ranges) have no ``ranges`` and still import. Only the table that
answers each range is exported (the newest of its range on its device: an older one of
the same range is never served), oldest first, so that tables imported in file order
overlap as they did (the newest covering table answers an exact size).

:class:`CacheFile` checks its shape and that every schedule and range names a workload
and a device of the file; the command checks what needs the operators and the code
generator (keys and hashes recomputed). Importing keeps, per (workload, device), the
faster of the cached and the imported schedule, and per range and device the faster
table (a GPU timing beats a simulated one), so importing a file twice changes nothing
the second time.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db import ranges as ranges_repo
from service.db import repositories as repo
from service.db import results as results_repo
from service.db.models import (
    DeviceModel,
    KernelModel,
    RangeTableModel,
    ScheduleModel,
    WorkloadModel,
)

FORMAT = "pipetune-cache"
VERSION = 2
#: The versions this pipetune reads (1: before range tables).
VERSIONS = (1, 2)
_KEY = r"^[0-9a-f]{64}$"
#: How a GPU timed a latency (``scheduler_search.search.presets``' ``EVENTS`` and
#: ``GRAPH``): per-launch CUDA events, or a CUDA graph's replay.
TimingMethod = Literal["events", "graph"]


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WorkloadEntry(_Entry):
    key: str = Field(pattern=_KEY)
    op: str = Field(min_length=1, max_length=64)
    params: dict[str, Any]


class DeviceEntry(_Entry):
    key: str = Field(pattern=_KEY)
    name: str = Field(min_length=1, max_length=128)
    kind: Literal["simulated", "cuda"]
    simulated: bool
    identity: dict[str, Any]


class KernelEntry(_Entry):
    hash: str = Field(pattern=_KEY)
    schedule_hash: str = Field(pattern=_KEY)
    artifact: dict[str, Any]


class ScheduleEntry(_Entry):
    workload: str = Field(pattern=_KEY, description="A workload key of the file.")
    device: str = Field(pattern=_KEY, description="A device key of the file.")
    schedule_hash: str = Field(pattern=_KEY)
    schedule: dict[str, Any]
    choices: dict[str, Any]
    latency_us: float = Field(gt=0, allow_inf_nan=False)
    predicted_us: float | None = Field(default=None, allow_inf_nan=False)
    simulated: bool
    baseline: str | None = Field(default=None, max_length=32)
    baseline_latency_us: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    timing_method: TimingMethod | None = Field(
        default=None, description="How the GPU timed latency_us and baseline_latency_us.")
    kernel: KernelEntry | None = None

    @model_validator(mode="after")
    def _timed_on_a_gpu(self) -> ScheduleEntry:
        """Only a GPU's latency has a timing method (a simulated one is an estimate)."""
        if self.simulated and self.timing_method is not None:
            raise ValueError("timing_method: a simulated schedule's latency is an estimate, "
                             "timed by no GPU (null)")
        return self


_LATENCY = Field(gt=0, allow_inf_nan=False)


class RangeBucketEntry(_Entry):
    """A bucket as the range table stores it (``RangeTableModel``'s docstring)."""

    low: int = Field(ge=1)
    high: int = Field(ge=1)
    loss: float = Field(allow_inf_nan=False)
    samples: list[int]
    schedule_hash: str = Field(pattern=_KEY)
    kernel_hash: str | None = Field(default=None, pattern=_KEY)
    source: str | None = Field(default=None, max_length=64)
    choices: dict[str, Any]
    schedule: dict[str, Any]
    latencies_us: dict[str, Annotated[float, _LATENCY]]
    retimed_us: dict[str, Annotated[float, _LATENCY]] | None = None
    timing_methods: dict[str, TimingMethod] | None = Field(
        default=None, description="How the GPU timed each size, keyed as latencies_us.")


class RangeEntry(_Entry):
    """A tuned range on a device: its buckets, contiguous over ``low``..``high``, and
    their kernels (each once)."""

    device: str = Field(pattern=_KEY, description="A device key of the file.")
    op: str = Field(min_length=1, max_length=64)
    fixed_key: str = Field(pattern=_KEY)
    dim: str = Field(min_length=1, max_length=32)
    low: int = Field(ge=1)
    high: int = Field(ge=1)
    params: dict[str, Any]
    size_from: tuple[str, int]
    sizes: list[int]
    loss: float | None = Field(default=None, allow_inf_nan=False)
    simulated: bool
    buckets: list[RangeBucketEntry] = Field(min_length=1)
    kernels: list[KernelEntry]

    @model_validator(mode="after")
    def _contiguous(self) -> RangeEntry:
        """The buckets tile the range in order; each kernel they name is in ``kernels``;
        a simulated range's have no timing methods."""
        start = self.low
        for index, bucket in enumerate(self.buckets):
            if bucket.low != start or bucket.high < bucket.low:
                raise ValueError(f"buckets[{index}]: {bucket.low}..{bucket.high} does not "
                                 f"continue the range at {start}")
            start = bucket.high + 1
        if start != self.high + 1:
            raise ValueError(f"buckets: end at {start - 1}, the range at {self.high}")
        kernels = {k.hash for k in self.kernels}
        for index, bucket in enumerate(self.buckets):
            if bucket.kernel_hash is not None and bucket.kernel_hash not in kernels:
                raise ValueError(f"buckets[{index}].kernel_hash: not in the range's kernels")
            if self.simulated and bucket.timing_methods is not None:
                raise ValueError(f"buckets[{index}].timing_methods: a simulated range's "
                                 "latencies are estimates, timed by no GPU (null)")
        return self

    def range_key(self) -> tuple[str, str, str, str, int, int]:
        """What one table per file, and the cached table it meets, are keyed by."""
        return self.device, self.op, self.fixed_key, self.dim, self.low, self.high


class CacheFile(_Entry):
    """A cache file (see the module docstring)."""

    format: Literal["pipetune-cache"]
    version: Literal[1, 2]
    exported_at: dt.datetime | None = None
    workloads: list[WorkloadEntry]
    devices: list[DeviceEntry]
    schedules: list[ScheduleEntry]
    ranges: list[RangeEntry] = []

    @model_validator(mode="after")
    def _references(self) -> CacheFile:
        """Every schedule names a workload and a device of the file, once per pair; every
        range a device, once per range."""
        workloads = {w.key for w in self.workloads}
        devices = {d.key for d in self.devices}
        seen: set[tuple[str, str]] = set()
        for index, entry in enumerate(self.schedules):
            if entry.workload not in workloads:
                raise ValueError(f"schedules[{index}].workload: no workload {entry.workload}")
            if entry.device not in devices:
                raise ValueError(f"schedules[{index}].device: no device {entry.device}")
            if (entry.workload, entry.device) in seen:
                raise ValueError(f"schedules[{index}]: a second schedule of the same "
                                 "workload on the same device")
            seen.add((entry.workload, entry.device))
        if self.version == 1 and self.ranges:
            raise ValueError("ranges: a version 1 file has none (version 2 added them)")
        ranges: set[tuple[str, str, str, str, int, int]] = set()
        for index, table in enumerate(self.ranges):
            if table.device not in devices:
                raise ValueError(f"ranges[{index}].device: no device {table.device}")
            if table.range_key() in ranges:
                raise ValueError(f"ranges[{index}]: a second table of the same range on the "
                                 "same device")
            ranges.add(table.range_key())
        return self


@dataclass(frozen=True)
class ImportCounts:
    """What an import did, per schedule (or range table) of the file."""

    added: int = 0  # the cache had none for its (workload, device) or range and device
    replaced: int = 0  # faster than the cached one
    kept: int = 0  # the cached one is as fast or faster


@dataclass(frozen=True)
class CacheImport:
    """What an import did to the schedules and to the range tables."""

    schedules: ImportCounts
    ranges: ImportCounts


def export_cache(session: Session, *, op: str | None = None,
                 device: str | None = None) -> CacheFile:
    """The cached schedules and the tuned ranges (of ``op``, on ``device``: a name or key)
    as a cache file."""
    rows = repo.list_schedules(session, op=op, device=device, limit=1_000_000)
    tables = _answering_tables(session, op=op, device=device)
    kernels = _kernels(session, {r.kernel_hash for r in rows if r.kernel_hash is not None}
                       | {b["kernel_hash"] for t in tables for b in t.buckets
                          if b.get("kernel_hash")})
    workloads = {r.workload.key: r.workload for r in rows}
    devices = {r.device.key: r.device for r in [*rows, *tables]}
    return CacheFile(
        format=FORMAT,
        version=VERSION,
        exported_at=dt.datetime.now(dt.UTC),
        workloads=[WorkloadEntry(key=w.key, op=w.op, params=w.params)
                   for w in workloads.values()],
        devices=[DeviceEntry(key=d.key, name=d.name, kind=d.kind, simulated=d.simulated,
                             identity=d.identity) for d in devices.values()],
        schedules=[_schedule_entry(r, kernels.get(r.kernel_hash or "")) for r in rows],
        ranges=[_range_entry(t, kernels) for t in tables],
    )


def _kernels(session: Session, hashes: set[str]) -> dict[str, KernelModel]:
    if not hashes:
        return {}
    return {k.hash: k for k in session.scalars(
        select(KernelModel).where(KernelModel.hash.in_(hashes)))}


def _kernel_entry(kernel: KernelModel) -> KernelEntry:
    return KernelEntry(hash=kernel.hash, schedule_hash=kernel.schedule_hash,
                       artifact=kernel.artifact)


def _schedule_entry(row: ScheduleModel, kernel: KernelModel | None) -> ScheduleEntry:
    return ScheduleEntry(
        workload=row.workload.key,
        device=row.device.key,
        schedule_hash=row.schedule_hash,
        schedule=row.schedule,
        choices=row.choices,
        latency_us=row.latency_us,
        predicted_us=row.predicted_us,
        simulated=row.simulated,
        baseline=row.baseline,
        baseline_latency_us=row.baseline_latency_us,
        timing_method=row.timing_method,
        kernel=_kernel_entry(kernel) if kernel is not None else None,
    )


def _answering_tables(session: Session, *, op: str | None,
                      device: str | None) -> list[RangeTableModel]:
    """The newest table of each range on each device (an older one of the same range is
    never served), oldest first: imported in that order, they overlap as here."""
    rows, _ = ranges_repo.list_range_tables(session, op=op, device=device, limit=1_000_000)
    newest: dict[tuple[str, str, str, str, int, int], RangeTableModel] = {}
    for row in rows:  # newest first
        newest.setdefault((row.device.key, row.op, row.fixed_key, row.dim, row.low,
                           row.high), row)
    return sorted(newest.values(), key=lambda row: row.id)


def _range_entry(row: RangeTableModel, kernels: dict[str, KernelModel]) -> RangeEntry:
    hashes = dict.fromkeys(b["kernel_hash"] for b in row.buckets if b.get("kernel_hash"))
    fields = RangeBucketEntry.model_fields
    return RangeEntry(
        device=row.device.key, op=row.op, fixed_key=row.fixed_key, dim=row.dim,
        low=row.low, high=row.high, params=row.params, size_from=tuple(row.size_from),
        sizes=row.sizes, loss=row.loss, simulated=row.simulated,
        buckets=[RangeBucketEntry.model_validate({k: v for k, v in b.items() if k in fields})
                 for b in row.buckets],
        kernels=[_kernel_entry(kernels[h]) for h in hashes],
    )


def import_cache(session: Session, cache: CacheFile) -> CacheImport:
    """Offer every schedule and every range table of ``cache`` to the cache (the faster
    one stays; an imported one has no run); the counts."""
    devices: dict[str, DeviceModel] = {
        d.key: repo.get_or_create_device(session, key=d.key, name=d.name, kind=d.kind,
                                         simulated=d.simulated, identity=d.identity)
        for d in cache.devices
    }
    for kernel in [*(s.kernel for s in cache.schedules if s.kernel is not None),
                   *(k for t in cache.ranges for k in t.kernels)]:
        results_repo.store_kernel(session, kernel_hash=kernel.hash,
                                  schedule_hash=kernel.schedule_hash,
                                  artifact=kernel.artifact)
    done = CacheImport(schedules=_import_schedules(session, cache, devices),
                       ranges=_count(_import_range(session, t, devices[t.device])
                                     for t in cache.ranges))
    session.flush()
    return done


def _count(outcomes: Iterable[str]) -> ImportCounts:
    """Outcomes (``added``, ``replaced``, ``kept``) counted."""
    counts = {"added": 0, "replaced": 0, "kept": 0}
    for outcome in outcomes:
        counts[outcome] += 1
    return ImportCounts(**counts)


def _import_schedules(session: Session, cache: CacheFile,
                      devices: dict[str, DeviceModel]) -> ImportCounts:
    """Each schedule of the file stored where it is faster than the cached one."""
    workloads: dict[str, WorkloadModel] = {
        w.key: repo.get_or_create_workload(session, key=w.key, op=w.op, params=w.params)
        for w in cache.workloads
    }
    return _count(_import_schedule(session, entry, workloads[entry.workload],
                                   devices[entry.device]) for entry in cache.schedules)


def _import_schedule(session: Session, entry: ScheduleEntry, workload: WorkloadModel,
                     device: DeviceModel) -> str:
    before = repo.find_schedule(session, workload_id=workload.id, device_id=device.id)
    previous = (before.schedule_hash, before.latency_us) if before is not None else None
    row = repo.store_best_schedule(
        session, workload_id=workload.id, device_id=device.id, run_id=None,
        schedule_hash=entry.schedule_hash, schedule=entry.schedule,
        choices=entry.choices, latency_us=entry.latency_us,
        predicted_us=entry.predicted_us, simulated=entry.simulated,
        kernel_hash=entry.kernel.hash if entry.kernel is not None else None,
        timing_method=entry.timing_method,
    )
    taken = (row.schedule_hash, row.latency_us) != previous  # the row changed
    if taken:
        row.baseline, row.baseline_latency_us = entry.baseline, entry.baseline_latency_us
    return "kept" if not taken else "added" if previous is None else "replaced"


def _import_range(session: Session, entry: RangeEntry, device: DeviceModel) -> str:
    """The table stored as the newest of its range on the device where the cache has none
    of that range or a slower one (an older table stays, unserved, as a re-run leaves it)."""
    cached = ranges_repo.find_range(session, op=entry.op, fixed_key=entry.fixed_key,
                                    dim=entry.dim, low=entry.low, high=entry.high,
                                    device_id=device.id)
    if cached is not None and not _faster(entry, cached):
        return "kept"
    ranges_repo.store_range_table(
        session, op=entry.op, fixed_key=entry.fixed_key, dim=entry.dim, low=entry.low,
        high=entry.high, params=entry.params, size_from=list(entry.size_from),
        sizes=entry.sizes, buckets=[b.model_dump() for b in entry.buckets], loss=entry.loss,
        simulated=entry.simulated, device_id=device.id, run_id=None)
    return "added" if cached is None else "replaced"


def _faster(entry: RangeEntry, cached: RangeTableModel) -> bool:
    """Whether the imported table serves its range faster than the cached one: a GPU
    timing beats a simulated one; between two of a kind, the geometric mean over the sizes
    either sampled of the latency each serves them with (as a hit reports it) is lower.
    Equal tables tie, so a re-import keeps the cached one."""
    if entry.simulated != cached.simulated:
        return cached.simulated
    sizes = sorted({*entry.sizes, *cached.sizes})
    return (_served_us([b.model_dump() for b in entry.buckets], sizes)
            < _served_us(cached.buckets, sizes))


def _served_us(buckets: list[dict[str, Any]], sizes: list[int]) -> float:
    """The geometric mean over ``sizes`` of the latency the buckets serve each with
    (interpolated from the bucket's measured ones; infinite where one has none)."""
    from service.runs.ranges import interpolated_us

    logs = []
    for size in sizes:
        bucket = next(b for b in buckets if b["low"] <= size <= b["high"])
        latency = interpolated_us(bucket["latencies_us"], size)
        logs.append(math.log(latency) if latency is not None else math.inf)
    return math.exp(sum(logs) / len(logs)) if logs else math.inf
