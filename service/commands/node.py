"""``pipetune node start --address HEAD | stop``: join this host's GPUs to a Ray fleet.

``start`` reads the fingerprints of the local GPUs, groups identical ones, and starts one
Ray node per group (``ray start --address HEAD``) with ``CUDA_VISIBLE_DEVICES`` set to the
group, its GPUs as Ray GPUs, and one unit per GPU of the custom resource named from the
group's fingerprint key, by which the fleet's actors are placed. Each group's devices are
then registered in the service's database, so that ``GET /v1/devices`` lists them and a
``POST /v1/tune`` may name them (``fleet:<key prefix>``). Each Ray node needs an address of
its own: a host with two kinds of GPU gives one ``--node-ip-address`` per kind.
``--simulate h100[:N]`` offers N simulated GPUs of a catalog model instead (measured by the
cost model on the node: a fleet to try without GPUs). ``stop`` runs ``ray stop`` and
forgets the host's nodes. This is a launcher around ``ray start``, not a scheduler: Ray
places the work; a process with ``PIPETUNE_EXECUTOR=ray`` measures the fleet's runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from service.commands._database import add_database_option, open_database
from service.db.fleet import FleetEntry

if TYPE_CHECKING:
    from service.core.db import Database


@dataclass(frozen=True)
class NodePlan:
    """One Ray node to start: its address, the GPUs it offers, the command."""

    node: str
    entry: FleetEntry
    cuda_devices: str
    command: tuple[str, ...]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("node", help="join this host's GPUs to a Ray fleet",
                                   description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    start = actions.add_parser("start", help="start a Ray node per kind of local GPU and "
                               "register the GPUs (arguments after -- go to ray start)")
    start.add_argument("--address", required=True,
                       help="the Ray head's address (host:port), as ray start takes it")
    start.add_argument("--node-ip-address", action="append", dest="ips", default=None,
                       help="this node's address (repeatable: one per kind of GPU; default "
                       "this host's)")
    start.add_argument("--simulate", action="append", default=[], metavar="NAME[:N]",
                       help="offer N (default 1) simulated GPUs of a catalog model")
    start.add_argument("--no-gpus", action="store_true",
                       help="offer no local GPU (with --simulate: only simulated ones)")
    start.add_argument("--dry-run", action="store_true",
                       help="print the ray start commands; start and register nothing")
    stop = actions.add_parser("stop", help="ray stop, and forget this host's nodes")
    stop.add_argument("--node-ip-address", action="append", dest="ips", default=None,
                      help="the nodes to forget (default this host's address)")
    for sub in (start, stop):
        add_database_option(sub)
        sub.set_defaults(handler=run)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, extra: list[str], parser: argparse.ArgumentParser) -> int:
    if extra and (extra[0] != "--" or args.action == "stop"):
        parser.error(f"unrecognized arguments: {' '.join(extra)} (arguments for ray start "
                     "go after --)")
    ray_args = extra[1:]
    if args.action == "stop":
        return _stop(args)
    try:
        plans = plan_nodes(args.address, args.ips, _entries(args), ray_args)
    except ValueError as exc:
        parser.error(str(exc))
    if "--block" in ray_args and len(plans) > 1:
        parser.error("--block keeps one Ray node in the foreground: this host has "
                     f"{len(plans)} kinds of GPU (start one node per kind)")
    for plan in plans:
        print(_describe(plan), flush=True)
    if args.dry_run:
        return 0
    ray = shutil.which("ray")
    if ray is None:
        print("ray is not installed here: pip install 'pipetune[fleet]'", file=sys.stderr)
        return 1
    with open_database(args.database_url) as db:
        return _start(db, ray, plans)


def _start(db: Database, ray: str, plans: list[NodePlan]) -> int:
    """Register each node's GPUs, then ``ray start`` it (registered first, so a node kept
    in the foreground by ``--block`` is listed while it runs); a node that fails to start,
    or stops, is forgotten."""
    for plan in plans:
        _register(db, plan.node, [p.entry for p in plans if p.node == plan.node])
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": plan.cuda_devices}
        done = subprocess.run([ray, *plan.command[1:]], env=env, check=False)
        if done.returncode != 0 or "--block" in plan.command:
            _forget(db, plan.node)
        if done.returncode != 0:
            print(f"ray start failed for {plan.node} (exit {done.returncode})", file=sys.stderr)
            return done.returncode
    return 0


def plan_nodes(address: str, ips: list[str] | None,
               entries: list[tuple[FleetEntry, list[int]]],
               ray_args: list[str]) -> list[NodePlan]:
    """One ``ray start`` per kind of GPU, each on its own address.

    Raises:
        ValueError: nothing to offer, or fewer addresses than kinds of GPU.
    """
    from service.runs.fleet import placement_key
    from workers.executors.ray_pool import resource_name

    if not entries:
        raise ValueError("no GPU to offer here (CuPy sees none): --simulate NAME offers "
                         "simulated ones")
    addresses = ips or [_host_address()]
    if len(addresses) < len(entries):
        raise ValueError(f"{len(entries)} kinds of GPU need {len(entries)} Ray nodes, each "
                         "with its own --node-ip-address")
    plans = []
    for (entry, indices), node in zip(entries, addresses, strict=False):
        resources = {resource_name(placement_key(entry.identity)): entry.gpus}
        command = ("ray", "start", "--address", address, "--node-ip-address", node,
                   "--num-gpus", str(len(indices)), "--resources",
                   json.dumps(resources, separators=(",", ":")), *ray_args)
        plans.append(NodePlan(node, entry, ",".join(map(str, indices)), command))
    return plans


def _entries(args: argparse.Namespace) -> list[tuple[FleetEntry, list[int]]]:
    """This host's GPU groups (unless ``--no-gpus``) and the simulated ones asked for."""
    from service.runs import devices, fleet

    found = [] if args.no_gpus else fleet.local_entries(devices.gpu_probe)
    for text in args.simulate:
        name, _, count = text.partition(":")
        if count and not count.isdigit():
            raise ValueError(f"--simulate {text!r}: NAME or NAME:N")
        try:
            found.append((fleet.simulated_entry(name, int(count or 1)), []))
        except devices.DeviceError as exc:
            raise ValueError(f"--simulate {text!r}: {exc}") from exc
    return found


def _register(db: Database, node: str, entries: list[FleetEntry]) -> None:
    from service.db import fleet
    from service.db.repositories import session_scope

    with session_scope(db.sessions) as session:
        fleet.register_node(session, node=node, entries=entries)


def _forget(db: Database, node: str) -> int:
    from service.db import fleet
    from service.db.repositories import session_scope

    with session_scope(db.sessions) as session:
        return fleet.remove_node(session, node=node)


def _stop(args: argparse.Namespace) -> int:
    ray = shutil.which("ray")
    if ray is not None:
        subprocess.run([ray, "stop"], check=False)
    with open_database(args.database_url) as db:
        for node in args.ips or [_host_address()]:
            print(f"{node}: {_forget(db, node)} kind(s) of GPU left the fleet")
    return 0


def _describe(plan: NodePlan) -> str:
    from service.runs.fleet import fleet_name

    gpus = f"CUDA_VISIBLE_DEVICES={plan.cuda_devices}" if plan.cuda_devices else "no GPU"
    return (f"{fleet_name(plan.entry.key)}  {plan.entry.name} x {plan.entry.gpus} on "
            f"{plan.node} ({gpus}): {' '.join(plan.command)}")


def _host_address() -> str:
    """This host's address as other hosts reach it (its name's, else loopback)."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"
