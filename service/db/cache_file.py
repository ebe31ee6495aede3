"""The cache as a JSON file, to carry it between machines and databases, as Kernel
Tuner's cache files and TVM's tuning records are carried (``pipetune cache export`` /
``pipetune cache import``).

The file holds the workloads, the devices (by fingerprint key, as the cache keys them)
and the best schedule of each (workload, device) with its kernel::

    {"format": "pipetune-cache", "version": 1, "exported_at": "...",
     "workloads": [{"key", "op", "params"}],
     "devices": [{"key", "name", "kind", "simulated", "identity"}],
     "schedules": [{"workload", "device", "schedule_hash", "schedule", "choices",
                    "latency_us", "predicted_us", "simulated", "baseline",
                    "baseline_latency_us", "kernel": {"hash", "schedule_hash",
                                                      "artifact"} | null}]}

:class:`CacheFile` checks its shape and that every schedule names a workload and a
device of the file; the command checks what needs the operators and the code generator
(keys and hashes recomputed). Importing keeps, per (workload, device), the faster of the
cached and the imported schedule (a GPU timing beats a simulated one), so importing a
file twice changes nothing the second time.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db import repositories as repo
from service.db import results as results_repo
from service.db.models import DeviceModel, KernelModel, ScheduleModel, WorkloadModel

FORMAT = "pipetune-cache"
VERSION = 1
_KEY = r"^[0-9a-f]{64}$"


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
    kernel: KernelEntry | None = None


class CacheFile(_Entry):
    """A cache file (see the module docstring)."""

    format: Literal["pipetune-cache"]
    version: Literal[1]
    exported_at: dt.datetime | None = None
    workloads: list[WorkloadEntry]
    devices: list[DeviceEntry]
    schedules: list[ScheduleEntry]

    @model_validator(mode="after")
    def _references(self) -> CacheFile:
        """Every schedule names a workload and a device of the file, once per pair."""
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
        return self


@dataclass(frozen=True)
class ImportCounts:
    """What an import did, per schedule of the file."""

    added: int = 0  # the cache had none for its (workload, device)
    replaced: int = 0  # faster than the cached one
    kept: int = 0  # the cached one is as fast or faster


def export_cache(session: Session, *, op: str | None = None,
                 device: str | None = None) -> CacheFile:
    """The cached schedules (of ``op``, on ``device``: a name or key) as a cache file."""
    rows = repo.list_schedules(session, op=op, device=device, limit=1_000_000)
    hashes = {r.kernel_hash for r in rows if r.kernel_hash is not None}
    kernels = {k.hash: k for k in session.scalars(
        select(KernelModel).where(KernelModel.hash.in_(hashes)))} if hashes else {}
    workloads = {r.workload.key: r.workload for r in rows}
    devices = {r.device.key: r.device for r in rows}
    return CacheFile(
        format=FORMAT,
        version=VERSION,
        exported_at=dt.datetime.now(dt.UTC),
        workloads=[WorkloadEntry(key=w.key, op=w.op, params=w.params)
                   for w in workloads.values()],
        devices=[DeviceEntry(key=d.key, name=d.name, kind=d.kind, simulated=d.simulated,
                             identity=d.identity) for d in devices.values()],
        schedules=[_schedule_entry(r, kernels.get(r.kernel_hash or "")) for r in rows],
    )


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
        kernel=(KernelEntry(hash=kernel.hash, schedule_hash=kernel.schedule_hash,
                            artifact=kernel.artifact) if kernel is not None else None),
    )


def import_cache(session: Session, cache: CacheFile) -> ImportCounts:
    """Offer every schedule of ``cache`` to the cache (the faster one stays; an imported
    one has no run); the counts."""
    workloads: dict[str, WorkloadModel] = {
        w.key: repo.get_or_create_workload(session, key=w.key, op=w.op, params=w.params)
        for w in cache.workloads
    }
    devices: dict[str, DeviceModel] = {
        d.key: repo.get_or_create_device(session, key=d.key, name=d.name, kind=d.kind,
                                         simulated=d.simulated, identity=d.identity)
        for d in cache.devices
    }
    counts = {"added": 0, "replaced": 0, "kept": 0}
    for entry in cache.schedules:
        workload, device = workloads[entry.workload], devices[entry.device]
        before = repo.find_schedule(session, workload_id=workload.id, device_id=device.id)
        previous = (before.schedule_hash, before.latency_us) if before is not None else None
        if entry.kernel is not None:
            results_repo.store_kernel(session, kernel_hash=entry.kernel.hash,
                                      schedule_hash=entry.kernel.schedule_hash,
                                      artifact=entry.kernel.artifact)
        row = repo.store_best_schedule(
            session, workload_id=workload.id, device_id=device.id, run_id=None,
            schedule_hash=entry.schedule_hash, schedule=entry.schedule,
            choices=entry.choices, latency_us=entry.latency_us,
            predicted_us=entry.predicted_us, simulated=entry.simulated,
            kernel_hash=entry.kernel.hash if entry.kernel is not None else None,
        )
        taken = (row.schedule_hash, row.latency_us) != previous  # the row changed
        if taken:
            row.baseline, row.baseline_latency_us = entry.baseline, entry.baseline_latency_us
        outcome = "kept" if not taken else "added" if previous is None else "replaced"
        counts[outcome] += 1
    session.flush()
    return ImportCounts(**counts)
