"""Calibrations shipped with pipetune: fitted on the project's own GPU measurements.

``data/calibrations.json`` maps a device name (``Device.name``) and an operator to a
:class:`Calibration` (written by ``bench/calibrate.py``, with the measurements it was
fitted on and its error on each). The simulated device predicts with it by default, so
that its latencies read like the same kernels measured on that GPU.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from scheduler_search.cost_model.calibration import Calibration

DATA_FILE = "calibrations.json"


@cache
def _shipped() -> dict[str, Any]:
    text = resources.files("scheduler_search.cost_model").joinpath("data", DATA_FILE)
    return json.loads(text.read_text(encoding="utf-8"))


def shipped_calibration(device_name: str, op: str) -> Calibration | None:
    """The shipped calibration of ``op`` on the device named ``device_name``, if any."""
    entry = _shipped().get("devices", {}).get(device_name, {}).get(op)
    return Calibration.from_dict(entry["calibration"]) if entry else None


def shipped_entry(device_name: str, op: str) -> dict[str, Any] | None:
    """The whole shipped entry: the calibration, its sources and its per-case errors."""
    return _shipped().get("devices", {}).get(device_name, {}).get(op)


__all__ = ["DATA_FILE", "shipped_calibration", "shipped_entry"]
