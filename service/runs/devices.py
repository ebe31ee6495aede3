"""Device names of the API (``auto``, ``sim:h200``, ``cuda:0``) and their cache keys.

In this version every run is measured on the simulated device (the cost model): a
``sim:*`` name simulates a catalog GPU, and ``cuda:N`` simulates the model of the local
GPU N, built from its live properties. The device key (the cache's device column) of a
simulated device is distinct from any real GPU's fingerprint, so simulated results never
answer for measured ones.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from scheduler_search.hardware import CATALOG, Device, device_from_properties, get_device

DEFAULT_SIMULATED = "sim:h200"
_CUDA = re.compile(r"^cuda:(\d{1,3})$")


class DeviceError(ValueError):
    """A device name that is unknown or not available here (the API's ``device`` field)."""


@dataclass(frozen=True)
class ResolvedDevice:
    """A device a run can be measured on.

    Attributes:
        name: the canonical name (``sim:h200``, ``cuda:0``).
        key: the cache key (sha256 of the identity, marked simulated where it is).
        kind: ``simulated`` or ``cuda``.
        simulated: whether measurements come from the cost model.
        model: the hardware model the space and cost model use.
        identity: what the key hashes.
    """

    name: str
    key: str
    kind: str
    simulated: bool
    model: Device
    identity: dict[str, Any]


def _key(identity: dict[str, Any]) -> str:
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def simulated(short: str) -> ResolvedDevice:
    model = get_device(short)
    name = f"sim:{short.lower().removeprefix('sim:')}"
    identity = {"simulated": True, "catalog": name, "device": model.identity()}
    return ResolvedDevice(name, _key(identity), "simulated", True, model, identity)


@functools.cache
def local_gpu_count() -> int:
    """CUDA devices visible to CuPy here (0 without CuPy or a GPU); read once."""
    try:
        from cupy.cuda import runtime

        return int(runtime.getDeviceCount())
    except Exception:
        return 0


def _cuda(index: int) -> ResolvedDevice:
    count = local_gpu_count()
    if index >= count:
        raise DeviceError(
            f"cuda:{index} is not available: {count} CUDA device(s) visible on this host"
        )
    from cupy.cuda import runtime

    model = device_from_properties(runtime.getDeviceProperties(index))
    name = f"cuda:{index}"
    # Measured by the simulated device in this version: the key says so.
    identity = {"simulated": True, "live": model.identity()}
    return ResolvedDevice(name, _key(identity), "cuda", True, model, identity)


def resolve_device(name: str) -> ResolvedDevice:
    """The device of an API or CLI name.

    Raises:
        DeviceError: unknown name, or a ``cuda:N`` that this host does not have.
    """
    text = name.strip().lower()
    if text == "auto":
        return _cuda(0) if local_gpu_count() > 0 else simulated(DEFAULT_SIMULATED)
    if text.startswith("sim:"):
        if text.removeprefix("sim:") not in CATALOG:
            known = ", ".join(f"sim:{k}" for k in sorted(CATALOG))
            raise DeviceError(f"unknown simulated device {name!r}; known: {known}")
        return simulated(text)
    match = _CUDA.match(text)
    if match:
        return _cuda(int(match.group(1)))
    known = ", ".join(["auto", *(f"sim:{k}" for k in sorted(CATALOG)), "cuda:N"])
    raise DeviceError(f"unknown device {name!r}; use one of {known}")


def from_identity(kind: str, name: str, identity: dict[str, Any]) -> Device:
    """The hardware model of a stored device row (for resuming its runs)."""
    if kind == "simulated":
        return get_device(name)
    match = _CUDA.match(name)
    if match is None:
        raise DeviceError(f"cannot rebuild device {name!r}")
    return _cuda(int(match.group(1))).model


def available_devices() -> list[ResolvedDevice]:
    """Every device a request may name on this host."""
    found = [simulated(f"sim:{short}") for short in sorted(CATALOG)]
    found.extend(_cuda(i) for i in range(local_gpu_count()))
    return found
