"""A device's cost-model calibration: read before a GPU run, refit after one.

A GPU run ranks its candidates with the device's calibrated cost model when one is stored
(:func:`stored_calibration`). After the run succeeds, its measurements (at most
:data:`CALIBRATION_SAMPLES`, spread over its latency range) are fitted, merged into the
stored calibration and stored (:func:`refit_calibration`), so the next run on that device
ranks better. Neither ever fails a run: an error is logged and the run goes on without.
"""

from __future__ import annotations

import logging
from typing import Any

from scheduler_search.cost_model import Calibration, Sample, fit_calibration
from scheduler_search.ops import OperatorSpec
from scheduler_search.search import TrialRecord
from scheduler_search.sprogram import SProgram
from service.core.db import Database
from service.db import repositories as repo
from service.db import results as results_repo

logger = logging.getLogger(__name__)

#: Measurements a calibration fit looks at (spread over the run's latency range), and the
#: time it may take.
CALIBRATION_SAMPLES = 96
CALIBRATION_TIME_S = 5.0


def stored_calibration(db: Database, device_id: int, op: str) -> Calibration | None:
    """The stored calibration of (device, op), if any and not the identity."""
    try:
        with repo.session_scope(db.sessions) as session:
            stored = results_repo.find_calibration(session, device_id=device_id, op=op)
    except repo.StorageError:
        logger.exception("could not read the calibration of device %d", device_id)
        return None
    if stored is None:
        return None
    calibration = Calibration.from_dict(stored)
    return None if calibration.is_identity else calibration


def refit_calibration(
    db: Database,
    device_id: int,
    spec: OperatorSpec,
    model: Any,
    records: list[TrialRecord],
    prior: Calibration | None,
) -> Calibration | None:
    """Fit the cost model to a run's measurements, merge into ``prior``, store; the
    result, or ``None`` when nothing was fitted or stored."""
    records = _spread(sorted(records, key=lambda r: r.latency_us or 0.0), CALIBRATION_SAMPLES)
    samples = []
    for record in records:
        try:
            samples.append(Sample(SProgram.from_dict(record.schedule or {}), spec,
                                  float(record.latency_us or 0.0)))
        except (KeyError, TypeError, ValueError):
            continue
    try:
        fitted = fit_calibration(samples, model, prior=prior, time_limit_s=CALIBRATION_TIME_S)
        if fitted is None:
            return None
        merged = prior.merged(fitted) if prior is not None else fitted
        with repo.session_scope(db.sessions) as session:
            results_repo.store_calibration(
                session, device_id=device_id, op=spec.op, calibration=merged.to_dict()
            )
    except Exception:
        logger.exception("calibration of device %d failed", device_id)
        return None
    logger.info("device %d %s: cost model calibrated on %d samples (log RMSE %.3f -> %.3f)",
                device_id, spec.op, fitted.samples, fitted.log_rmse_before or 0.0,
                fitted.log_rmse_after or 0.0)
    return merged


def _spread(records: list[TrialRecord], limit: int) -> list[TrialRecord]:
    """At most ``limit`` of ``records`` (sorted), evenly spaced over them."""
    if len(records) <= limit:
        return records
    step = len(records) / limit
    return [records[int(i * step)] for i in range(limit)]
