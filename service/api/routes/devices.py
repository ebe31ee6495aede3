"""``GET /v1/devices``: the devices a request may name, and those runs have used."""

from __future__ import annotations

from fastapi import APIRouter

from service.api.deps import ExecutorDep, SessionDep, SettingsDep
from service.db import fleet, processes
from service.db import repositories as repo
from service.runs import fleet as fleet_devices
from service.runs.devices import available_devices
from service.schemas import DevicePublic, DevicesPublic

router = APIRouter(prefix="/devices", tags=["devices"])


@router.get("", response_model=DevicesPublic)
def list_devices(session: SessionDep, executors: ExecutorDep,
                 settings: SettingsDep) -> DevicesPublic:
    """Available devices (simulated catalog GPUs, local GPUs), the fleet's registered GPUs
    (available while a live process measures them) and known ones (in the database), with
    the executor measuring each where one is open."""
    open_executors = executors.describe()
    known = {row.key: row for row in repo.list_devices(session)}
    data: list[DevicePublic] = []
    served = processes.served_keys(session, stale_after_s=settings.stale_after_s)
    for registered in fleet.fleet_devices(session):
        device = fleet_devices.resolved(registered)
        data.append(DevicePublic(
            name=device.name, key=device.key, kind=device.kind, simulated=device.simulated,
            available=device.key in served, known=device.key in known,
            identity={**device.identity, "gpus": registered.gpus,
                      "nodes": list(registered.nodes)}))
    for device in available_devices():
        data.append(
            DevicePublic(
                name=device.name,
                key=device.key,
                kind=device.kind,
                simulated=device.simulated,
                available=True,
                known=device.key in known,
                identity=device.identity,
            )
        )
    listed = {d.key for d in data}
    data.extend(DevicePublic.of_row(row, available=False) for k, row in known.items()
                if k not in listed)
    for entry in data:
        executor = open_executors.get(entry.key)
        if executor is not None:
            entry.executor = str(executor["executor"])
            entry.capacity = int(executor["capacity"])  # type: ignore[call-overload]
            entry.dispatch = executor.get("dispatch")  # type: ignore[assignment]
    return DevicesPublic(data=data, count=len(data))
