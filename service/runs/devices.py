"""Device names of the API (``auto``, ``sim:h200``, ``cuda:0``) and their cache keys.

A ``sim:*`` name is a catalog GPU measured by the simulated device (the cost model).
``cuda:N@sm_80`` is the same GPU running code generated for an older architecture (sm_80,
sm_86 or sm_89: Ampere-class kernels measured on a Hopper GPU), a device of its own key, so
its kernels never answer for the GPU's native ones. ``cuda:N`` is the local GPU N (as CuPy
numbers the visible ones), measured by a
``LocalGpuPool`` worker pinned to it: its key is the sha256 of its live fingerprint
(``workers.device``: name, compute capability, SMs, memory, L2, driver, CUDA runtime,
CuPy, pipetune's code generation version) and its hardware model comes from its live
properties. ``auto`` is ``cuda:0`` when CuPy is importable and sees a GPU, else
``sim:h200``. A simulated device's key is distinct from any real GPU's, so simulated
results never answer for measured ones.

What "a GPU is here" means is asked of :data:`gpu_probe` (CuPy by default); tests set
another with :func:`set_gpu_probe`.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from scheduler_search.canonical import canonical_sha256
from scheduler_search.hardware import (
    CATALOG,
    CODE_ARCHS,
    Device,
    device_from_properties,
    get_device,
    running_code_of,
)

logger = logging.getLogger(__name__)

DEFAULT_SIMULATED = "sim:h200"
_CUDA = re.compile(r"^cuda:(\d{1,3})$")
#: ``cuda:N@sm_80``: local GPU N running another architecture's code.
_CUDA_AS = re.compile(r"^cuda:(\d{1,3})@(sm_\d{2,3}a?)$")


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
    return canonical_sha256(identity)


def simulated(short: str) -> ResolvedDevice:
    model = get_device(short)
    name = f"sim:{short.lower().removeprefix('sim:')}"
    identity = {"simulated": True, "catalog": name, "device": model.identity()}
    return ResolvedDevice(name, _key(identity), "simulated", True, model, identity)


class GpuProbe(Protocol):
    """What the service asks about local GPUs (CuPy's numbering)."""

    def count(self) -> int: ...

    def properties(self, index: int) -> Mapping[str, Any]: ...

    def fingerprint(self, index: int) -> dict[str, Any]: ...


class CupyProbe:
    """Local GPUs as CuPy sees them; nothing (count 0) without CuPy or a GPU."""

    def __init__(self) -> None:
        self._count: int | None = None

    def count(self) -> int:
        if self._count is None:
            try:
                from cupy.cuda import runtime

                self._count = int(runtime.getDeviceCount())
            except Exception:
                self._count = 0
        return self._count

    def properties(self, index: int) -> Mapping[str, Any]:
        from cupy.cuda import runtime

        return runtime.getDeviceProperties(index)

    def fingerprint(self, index: int) -> dict[str, Any]:
        from codegen import codegen_version
        from workers import read_fingerprint

        return read_fingerprint(index, codegen_version())


gpu_probe: GpuProbe = CupyProbe()
_resolved: dict[int, ResolvedDevice] = {}
_resolved_lock = threading.Lock()


def set_gpu_probe(probe: GpuProbe) -> GpuProbe:
    """Use ``probe`` to find local GPUs from now on; returns the previous one."""
    global gpu_probe
    with _resolved_lock:
        previous, gpu_probe = gpu_probe, probe
        _resolved.clear()
    return previous


def local_gpu_count() -> int:
    """CUDA devices visible here (0 without CuPy or a GPU)."""
    return gpu_probe.count()


#: Fingerprint fields that describe software; the hardware model records them too.
_SOFTWARE = ("driver_version", "driver_release", "cuda_runtime_version", "cupy_version",
             "codegen_version")


def _cuda(index: int) -> ResolvedDevice:
    count = local_gpu_count()
    if index >= count:
        raise DeviceError(
            f"cuda:{index} is not available: {count} CUDA device(s) visible on this host"
        )
    with _resolved_lock:
        if index not in _resolved:
            fingerprint = gpu_probe.fingerprint(index)
            software = {k: str(fingerprint.get(k, "")) for k in _SOFTWARE}
            model = device_from_properties(gpu_probe.properties(index), software)
            identity = {"fingerprint": fingerprint, "live": model.identity()}
            key = _key(fingerprint)  # == workers.fingerprint_key(fingerprint)
            _resolved[index] = ResolvedDevice(f"cuda:{index}", key, "cuda", False, model,
                                              identity)
        return _resolved[index]


def _cuda_as(index: int, arch: str) -> ResolvedDevice:
    """Local GPU ``index`` running code generated for ``arch`` (:func:`running_code_of`)."""
    native = _cuda(index)
    try:
        model = running_code_of(native.model, arch)
    except ValueError as error:
        raise DeviceError(f"cuda:{index}@{arch}: {error}") from None
    identity = {**native.identity, "code_arch": arch}
    key = _key({"fingerprint": native.identity["fingerprint"], "code_arch": arch})
    return ResolvedDevice(f"cuda:{index}@{arch}", key, "cuda", False, model, identity)


def cuda_index(device: ResolvedDevice) -> int:
    """N of a ``cuda:N`` (or ``cuda:N@ARCH``) device."""
    match = _CUDA.match(device.name) or _CUDA_AS.match(device.name)
    if match is None:
        raise DeviceError(f"{device.name!r} is not a local GPU")
    return int(match.group(1))


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
    match = _CUDA_AS.match(text)
    if match:
        return _cuda_as(int(match.group(1)), match.group(2))
    known = ", ".join(["auto", *(f"sim:{k}" for k in sorted(CATALOG)), "cuda:N",
                       f"cuda:N@ARCH (ARCH: {', '.join(CODE_ARCHS)})"])
    if text in CATALOG:
        raise DeviceError(f"unknown device {name!r}: the simulated {text.upper()} is "
                          f"sim:{text}, a local GPU cuda:N; use one of {known}")
    raise DeviceError(f"unknown device {name!r}; use one of {known}")


_KEY = re.compile(r"^[0-9a-f]{64}$")


def device_filter_error(text: str) -> str | None:
    """Why ``text`` cannot name a stored device (a ``sim:NAME``, ``cuda:N`` or a 64-hex
    device key), or None; a filter never probes this host's GPUs."""
    lowered = text.strip().lower()
    if _KEY.match(lowered) or _CUDA.match(lowered) or _CUDA_AS.match(lowered):
        return None
    if lowered.startswith("sim:") and lowered.removeprefix("sim:") in CATALOG:
        return None
    known = ", ".join([*(f"sim:{k}" for k in sorted(CATALOG)), "cuda:N", "a device key"])
    hint = f" (the simulated {lowered.upper()} is sim:{lowered})" if lowered in CATALOG else ""
    return f"unknown device {text!r}{hint}; use one of {known}"


#: The software versions of a fleet GPU's fingerprint that its model keeps.
_FLEET_SOFTWARE = ("driver_version", "driver_release", "cuda_runtime_version",
                   "cupy_version", "codegen_version")


def model_of(identity: Mapping[str, Any]) -> Device:
    """The hardware model of a fleet device, from its registered identity (the
    properties and fingerprint ``pipetune node start`` registered, or a simulated
    catalog device)."""
    if identity.get("fleet") == "simulated":
        return get_device(str(identity["catalog"]))
    fingerprint = identity["fingerprint"]
    software = {k: str(fingerprint.get(k, "")) for k in _FLEET_SOFTWARE}
    return device_from_properties(identity["properties"], software)


def from_identity(kind: str, name: str, identity: dict[str, Any]) -> Device:
    """The hardware model of a stored device row (for resuming its runs)."""
    if kind == "simulated":
        return get_device(name)
    if kind == "fleet":
        return model_of(identity)
    match = _CUDA_AS.match(name)
    if match:
        return _cuda_as(int(match.group(1)), match.group(2)).model
    match = _CUDA.match(name)
    if match is None:
        raise DeviceError(f"cannot rebuild device {name!r}")
    return _cuda(int(match.group(1))).model


def served_device_keys() -> frozenset[str]:
    """The keys of every device this process can measure (:func:`available_devices`):
    the runs it may claim. GPUs that cannot be probed are left out (their runs wait for
    a process that can measure them), not a reason to refuse to start."""
    try:
        return frozenset(device.key for device in available_devices())
    except Exception as exc:  # a broken driver or GPU: serve the simulated devices
        logger.warning("local GPUs not served: %s", exc)
        return frozenset(simulated(f"sim:{short}").key for short in CATALOG)


def available_devices() -> list[ResolvedDevice]:
    """Every device a request may name on this host."""
    found = [simulated(f"sim:{short}") for short in sorted(CATALOG)]
    found.extend(_cuda(i) for i in range(local_gpu_count()))
    return found
