"""What a GPU run leaves besides its trials: the kernel of its best schedule, the vendor
baseline it was compared with (and further peers), and the device's cost-model calibration.

Functions take an open session (``repositories.session_scope``) and keyword arguments,
as ``service.db.repositories`` does.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.db.models import CalibrationModel, KernelModel, RunModel, ScheduleModel, utcnow


def store_kernel(
    session: Session,
    *,
    kernel_hash: str,
    schedule_hash: str,
    artifact: dict[str, Any],
) -> KernelModel:
    """The kernel row of ``kernel_hash`` (the artifact's sha256), created if new."""
    row = KernelModel.find(session, kernel_hash)
    if row is not None:
        return row
    try:
        with session.begin_nested():
            row = KernelModel(
                hash=kernel_hash,
                schedule_hash=schedule_hash,
                artifact=artifact,
                source=artifact["source"],
            )
            session.add(row)
        return row
    except IntegrityError:  # another process stored the same kernel meanwhile
        found = KernelModel.find(session, kernel_hash)
        if found is None:
            raise
        return found


def set_run_baseline(
    session: Session,
    *,
    run_id: int,
    baseline: str | None,
    latency_us: float | None,
    timing_method: str | None,
) -> None:
    """Record the vendor peer and its latency on a run, and how the GPU timed the run's
    kernels and peers (``"events"`` or ``"graph"``; None: not on a GPU)."""
    run = RunModel.find(session, run_id)
    if run is not None:
        run.baseline, run.baseline_latency_us = baseline, latency_us
        run.timing_method = timing_method


def set_run_peers(session: Session, *, run_id: int, latencies_us: dict[str, float]) -> None:
    """Record the further peers' latencies (us, by name) on a run."""
    run = RunModel.find(session, run_id)
    if run is not None:
        run.peer_latencies_us = {name: float(value) for name, value in latencies_us.items()}


def set_schedule_baseline(
    session: Session,
    *,
    workload_id: int,
    device_id: int,
    run_id: int,
    baseline: str,
    latency_us: float | None,
) -> None:
    """Record the baseline on the cached schedule, if it is still the one ``run_id`` found
    (a faster one from another run keeps its own comparison). How both were timed came
    with the schedule (``repositories.store_best_schedule``'s ``timing_method``)."""
    row = ScheduleModel.find(session, workload_id, device_id)
    if row is not None and row.run_id == run_id:
        row.baseline, row.baseline_latency_us = baseline, latency_us


def find_calibration(session: Session, *, device_id: int, op: str) -> dict[str, Any] | None:
    row = CalibrationModel.find(session, device_id, op)
    return dict(row.calibration) if row is not None else None


def store_calibration(
    session: Session, *, device_id: int, op: str, calibration: dict[str, Any]
) -> CalibrationModel:
    """Replace the calibration of (device, op); counts the runs that contributed."""
    row = CalibrationModel.find(session, device_id, op)
    samples = int(calibration.get("samples", 0))
    if row is None:
        try:
            with session.begin_nested():
                row = CalibrationModel(
                    device_id=device_id, op=op, calibration=calibration, samples=samples, runs=1
                )
                session.add(row)
            return row
        except IntegrityError:
            row = CalibrationModel.find(session, device_id, op)
            if row is None:
                raise
    row.calibration, row.samples = calibration, samples
    row.runs += 1
    row.updated_at = utcnow()
    return row


__all__ = [
    "find_calibration",
    "set_run_baseline",
    "set_run_peers",
    "set_schedule_baseline",
    "store_calibration",
    "store_kernel",
]
