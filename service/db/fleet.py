"""The fleet's GPUs as the database records them (``pipetune node start`` writes them).

A node registers each kind of GPU it offers (one row per node and device key); the API
lists the fleet's devices from these rows without asking Ray, and a run on a fleet device
rebuilds its hardware model from the stored identity. A node that starts again replaces
its rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from service.db.models import FleetDeviceModel


@dataclass(frozen=True)
class FleetEntry:
    """One kind of GPU a node offers: its fingerprint key, name, identity and count."""

    key: str
    name: str
    simulated: bool
    identity: dict[str, Any]
    gpus: int


@dataclass(frozen=True)
class FleetDevice(FleetEntry):
    """One kind of GPU over the whole fleet: ``gpus`` summed over the ``nodes`` offering it."""

    nodes: tuple[str, ...] = ()


def register_node(session: Session, *, node: str, entries: Iterable[FleetEntry]) -> None:
    """Record what ``node`` offers, replacing what it registered before."""
    session.execute(delete(FleetDeviceModel).where(FleetDeviceModel.node == node))
    for entry in entries:
        session.add(FleetDeviceModel(node=node, key=entry.key, name=entry.name,
                                     simulated=entry.simulated, identity=entry.identity,
                                     gpus=entry.gpus))


def remove_node(session: Session, *, node: str) -> int:
    """Forget ``node``'s GPUs; how many kinds it had."""
    return session.execute(
        delete(FleetDeviceModel).where(FleetDeviceModel.node == node)).rowcount or 0


def fleet_devices(session: Session) -> list[FleetDevice]:
    """Every registered kind of GPU, its GPUs summed over the nodes, by key."""
    rows = session.scalars(
        select(FleetDeviceModel).order_by(FleetDeviceModel.key, FleetDeviceModel.node))
    grouped: dict[str, list[FleetDeviceModel]] = {}
    for row in rows:
        grouped.setdefault(row.key, []).append(row)
    return [FleetDevice(key=key, name=group[0].name, simulated=group[0].simulated,
                        identity=dict(group[0].identity), gpus=sum(r.gpus for r in group),
                        nodes=tuple(r.node for r in group))
            for key, group in grouped.items()]
