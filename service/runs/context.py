"""What every run of one manager shares, handed from the manager to each run's execution.

:class:`~service.runs.manager.RunManager` builds one :class:`RunContext`;
:class:`~service.runs.execution.RunExecution` and :mod:`service.runs.finish` read it rather
than reaching back into the manager.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from service.core.config import Settings
from service.core.db import Database
from service.core.metrics import Metrics
from service.runs.executors import ExecutorRegistry


@dataclass(frozen=True)
class RunContext:
    """The services a run uses and the manager's shutdown signal.

    Attributes:
        db: sessions and the Optuna storage.
        settings: batch size, warm start, cost-model seeds, calibration.
        executors: the executor of each device.
        metrics: counters to update, or ``None``.
        owner: the manager's ``host:pid:token``; a run's progress and release are written
            as this owner, so a run another process has taken over is left alone.
        shutdown: set by ``RunManager.close()``: a run stops at its next round and is left
            ``running`` without an owner, for the next start to resume.
    """

    db: Database
    settings: Settings
    executors: ExecutorRegistry
    metrics: Metrics | None
    owner: str
    shutdown: threading.Event
