"""Fleet devices: GPUs of a Ray cluster that runs may name (``fleet:<key prefix>``).

``pipetune node start`` groups a host's GPUs by fingerprint key and registers each group
(:class:`~service.db.fleet.FleetEntry`) in the database; the API lists them and resolves
``fleet:...`` names from those rows, without importing Ray. A fleet device's cache key is
its own (``sha256`` of ``{"fleet": ..., "placement": ...}``), distinct from the key the same
GPU has as a local ``cuda:N``: a run names one way of being measured, and the cache never
answers one with the other's results. ``placement`` is the fingerprint key of the GPUs
(the Ray resource the node offers and each actor checks); a simulated kind (for tests and
demonstrations, ``--simulate h100``) places by its own key and is measured by the cost
model on the node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from scheduler_search.canonical import canonical_sha256
from scheduler_search.hardware import CATALOG, get_device
from service.db.fleet import FleetDevice, FleetEntry
from service.runs.devices import DeviceError, GpuProbe, ResolvedDevice, model_of

PREFIX = "fleet:"
#: Hex digits of the key in a fleet device's name.
NAME_DIGITS = 12
#: What ``device_from_properties`` reads, kept from a GPU's properties (CuPy's names).
PROPERTY_KEYS = ("name", "major", "minor", "multiProcessorCount", "sharedMemPerMultiprocessor",
                 "sharedMemPerBlockOptin", "regsPerMultiprocessor", "maxThreadsPerBlock",
                 "maxThreadsPerMultiProcessor", "l2CacheSize", "clockRate", "totalGlobalMem",
                 "memoryClockRate", "memoryBusWidth")


def _sha256(value: Any) -> str:
    return canonical_sha256(value)


def placement_key(identity: Mapping[str, Any]) -> str:
    """The key a fleet device's Ray resource is named from (and its actors check)."""
    return str(identity["placement"])


def fleet_name(key: str) -> str:
    return f"{PREFIX}{key[:NAME_DIGITS]}"


def gpu_entry(fingerprint: dict[str, Any], properties: Mapping[str, Any],
              gpus: int) -> FleetEntry:
    """A group of identical local GPUs as the fleet registers it."""
    from workers.device import fingerprint_key

    props = {k: _plain(properties[k]) for k in PROPERTY_KEYS}
    identity = {"fleet": "gpu", "placement": fingerprint_key(fingerprint),
                "fingerprint": fingerprint, "properties": props}
    return FleetEntry(key=_sha256({"fleet": "gpu", "placement": identity["placement"]}),
                      name=str(fingerprint.get("name", props["name"])), simulated=False,
                      identity=identity, gpus=gpus)


def simulated_entry(short: str, gpus: int) -> FleetEntry:
    """A simulated kind of GPU offered by a node (measured by the cost model there)."""
    short = short.lower().removeprefix("sim:")
    if short not in CATALOG:
        known = ", ".join(sorted(CATALOG))
        raise DeviceError(f"unknown simulated device {short!r}; known: {known}")
    model = get_device(short)
    base = {"fleet": "simulated", "catalog": short, "device": model.identity()}
    key = _sha256(base)
    return FleetEntry(key=key, name=f"simulated {model.name}", simulated=True,
                      identity={**base, "placement": key}, gpus=gpus)


def local_entries(probe: GpuProbe) -> list[tuple[FleetEntry, list[int]]]:
    """This host's GPUs grouped by fingerprint key, each group with its CUDA indices."""
    groups: dict[str, tuple[dict[str, Any], Mapping[str, Any], list[int]]] = {}
    for index in range(probe.count()):
        fingerprint = probe.fingerprint(index)
        key = _sha256(fingerprint)
        groups.setdefault(key, (fingerprint, probe.properties(index), []))[2].append(index)
    return [(gpu_entry(fp, props, len(indices)), indices)
            for fp, props, indices in groups.values()]


def resolved(device: FleetDevice) -> ResolvedDevice:
    """A registered fleet device as a device runs may name."""
    return ResolvedDevice(fleet_name(device.key), device.key, "fleet", device.simulated,
                          model_of(device.identity), dict(device.identity))


def resolve(name: str, devices: Callable[[], list[FleetDevice]]) -> ResolvedDevice:
    """The fleet device ``fleet:<key prefix>`` names (at least 12 hex digits).

    Raises:
        DeviceError: no registered fleet device has that prefix, or several do.
    """
    prefix = name.strip().lower().removeprefix(PREFIX)
    if len(prefix) < NAME_DIGITS or any(ch not in "0123456789abcdef" for ch in prefix):
        raise DeviceError(f"{name!r}: a fleet device is named fleet:<the first "
                          f"{NAME_DIGITS} or more hex digits of its key> (GET /v1/devices)")
    found = [d for d in devices() if d.key.startswith(prefix)]
    if not found:
        raise DeviceError(f"no fleet device {name!r} is registered (pipetune node start "
                          "registers a node's GPUs; GET /v1/devices lists them)")
    if len(found) > 1:
        raise DeviceError(f"{name!r} names {len(found)} fleet devices: give more of the key")
    return resolved(found[0])


def _plain(value: Any) -> Any:
    """A property value as JSON keeps it (CuPy gives the name as bytes)."""
    return value.decode() if isinstance(value, bytes) else value
