"""A Ray cluster of several nodes on one machine, each node on its own loopback address:
how the fleet is tested and benchmarked without several machines.

The head starts on the machine's own address (Ray binds its GCS there whatever it is
told); each node joins with ``ray start --address HEAD --node-ip-address 127.0.0.N``, as
``pipetune node start`` would run it. Health checks are short (a lost node is seen in
about 1.5 s instead of 15 s), token authentication and telemetry are off. A node is lost
by killing its raylet and every process under it, as when its machine goes away; the
cluster is stopped the same way, never by ``ray stop``, which would stop every Ray instance
of the machine. Linux only (``/proc``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

#: Every Ray process of the cluster: no token, no telemetry, fast health checks.
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_DISABLE_USAGE_STATS": "1",
           "RAY_health_check_initial_delay_ms": "0", "RAY_health_check_period_ms": "500",
           "RAY_health_check_timeout_ms": "500", "RAY_health_check_failure_threshold": "3"}


def ray_command() -> str | None:
    """Ray's command line: on PATH, or beside this interpreter (a venv not activated)."""
    return shutil.which("ray") or shutil.which("ray", path=str(Path(sys.executable).parent))


class LoopbackCluster:
    """A head, and the nodes :meth:`add_node` starts; see the module docstring."""

    def __init__(self) -> None:
        self.ray = ray_command()
        if self.ray is None:
            raise RuntimeError("Ray's command line is not installed: pip install "
                               "'pipetune[fleet]'")
        os.environ.update(RAY_ENV)  # this process's driver talks to the cluster the same way
        self.temp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # Ray's sockets: short paths
        self.node_ips: set[str] = set()
        out = self.run("start", "--head", "--port=0", "--num-cpus=1",
                       "--include-dashboard=false", f"--temp-dir={self.temp}")
        found = re.search(r"--address='([^']+)'", out)
        if found is None:
            self.close()
            raise RuntimeError(f"the Ray head did not say its address: {out[-500:]}")
        self.address = found.group(1)

    def run(self, *args: str) -> str:
        """``ray ARGS`` with the cluster's environment; its output (raises on failure)."""
        done = subprocess.run([self.ray, *args], env={**os.environ, **RAY_ENV},
                              capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"ray {' '.join(args[:2])} failed: "
                               f"{(done.stdout + done.stderr)[-1500:]}")
        return done.stdout + done.stderr

    def add_node(self, command: Sequence[str]) -> None:
        """Start a node with a ``ray start ...`` command (``pipetune node start``'s plan)."""
        ip = command[list(command).index("--node-ip-address") + 1]
        self.node_ips.add(ip)
        self.run(*command[1:])

    def kill_node(self, ip: str) -> None:
        """Lose the node at ``ip``: SIGKILL its raylet and every process under it."""
        if not _kill_trees(lambda argv: _raylet_of(argv, {ip})):
            raise RuntimeError(f"no raylet of {ip} is running")

    def close(self) -> None:
        _kill_trees(lambda argv: any(self.temp in a for a in argv)
                    or _raylet_of(argv, self.node_ips))
        shutil.rmtree(self.temp, ignore_errors=True)


def _raylet_of(argv: list[str], ips: set[str]) -> bool:
    """Whether ``argv`` is the raylet of a node at one of ``ips``."""
    return "raylet" in argv[0] and any(a.split("=", 1)[1] in ips for a in argv[1:]
                                       if a.startswith("--node_ip_address="))


def _kill_trees(roots: Callable[[list[str]], bool]) -> int:
    """SIGKILL each process whose argv ``roots`` picks, and its descendants; how many."""
    parents: dict[int, int] = {}
    picked = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        parents[int(pid)] = int(stat.rsplit(")", 1)[1].split()[1])
        if argv[0] and roots(argv):
            picked.add(int(pid))
    doomed = set(picked)
    while grown := {p for p, parent in parents.items() if parent in doomed} - doomed:
        doomed |= grown
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(picked)
