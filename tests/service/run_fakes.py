"""Helpers of the run-manager tests that drive a run from inside: a simulated device that
holds its first batch until released, a queued run, waiting on a condition, and a run
manager that seems to live on another host."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import pytest
from service_helpers import SMALL_GEMM

import migrations
from service.core.config import Settings
from service.core.db import Database
from service.db import repositories as repo
from service.runs import manager as manager_module
from service.runs.devices import ResolvedDevice
from service.runs.executors import ExecutorRegistry
from service.runs.manager import RunManager
from service.runs.tune import prepare
from service.schemas import TuneRequest
from workers import Executor, Job, Measurement, SimulatedDevice

#: How long a test waits for a condition that should hold within a second or two.
WAIT_S = 30.0


class Gate:
    """Holds the first batch a device measures until :meth:`open` (``entered`` is set
    once that batch arrives); later batches pass."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self._opened = threading.Event()
        self.batches = 0

    def open(self) -> None:
        self._opened.set()

    def pass_through(self) -> None:
        self.batches += 1
        self.entered.set()
        assert self._opened.wait(WAIT_S), "the gate was never opened"


class _GatedDevice(SimulatedDevice):
    def __init__(self, model: object, capacity: int, gate: Gate) -> None:
        super().__init__(model, capacity=capacity)
        self._gate = gate

    def measure(self, jobs: Sequence[Job]) -> list[Measurement]:
        self._gate.pass_through()
        return super().measure(jobs)


class GatedRegistry(ExecutorRegistry):
    """Executors whose simulated devices measure through ``gate``."""

    def __init__(self, gate: Gate, simulated_capacity: int = 8) -> None:
        super().__init__(simulated_capacity)
        self._gate = gate

    def _make(self, device: ResolvedDevice) -> Executor:
        return _GatedDevice(device.model, self.simulated_capacity, self._gate)


def queue_run(manager: RunManager, settings: Settings, trials: int = 16,
              params: dict | None = None) -> int:
    """A new queued run of a small GEMM on the simulated H200; its id."""
    request = TuneRequest(op="gemm", params=params or SMALL_GEMM, device="sim:h200",
                          budget={"trials": trials})
    submitted = manager.submit(prepare(request, settings))
    assert submitted.run is not None and submitted.created
    return submitted.run.id


def until(condition: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    """Wait until ``condition()`` holds (polled every 20 ms)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still not true after {timeout_s} s")
        time.sleep(0.02)


def finished(manager: RunManager, run_id: int) -> bool:
    run = manager.get(run_id)
    return run is not None and run.status not in ("queued", "running")


def trial_hashes(manager: RunManager, run_id: int) -> list[str]:
    with repo.session_scope(manager.db.sessions) as session:
        rows, _ = repo.list_trials(session, run_id=run_id)
        return [t.schedule_hash for t in rows]


#: The owner of a run manager of another host (one that takes a run over).
OTHER_OWNER = "elsewhere:4242:0000beef"


@contextmanager
def run_managers(db: Database) -> Iterator[Callable[..., RunManager]]:
    """Makes run managers on ``db``; closes them and their executors at the end."""
    made: list[RunManager] = []

    def make(settings: Settings, executors: ExecutorRegistry | None = None) -> RunManager:
        manager = RunManager(db, settings, executors or ExecutorRegistry(8))
        made.append(manager)
        return manager

    try:
        yield make
    finally:
        for manager in made:
            manager.close()
            manager.executors.close()


@contextmanager
def migrated(url: str) -> Iterator[Database]:
    """The database at ``url``, upgraded, its SQLite file remembered; disposed after."""
    database = Database(url)
    migrations.upgrade(database.url, engine=database.engine)
    database.remember_file()
    try:
        yield database
    finally:
        database.dispose()


@contextmanager
def on_another_host(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Meanwhile, the run managers of this process read as another host's: only a
    heartbeat tells whether they are alive."""
    with monkeypatch.context() as patch:
        patch.setattr(manager_module.socket, "gethostname", lambda: "elsewhere")
        yield
