"""The ``pipetune worker`` processes that ``pipetune serve`` starts, so that searches run
outside the API's interpreter (with two simulated runs in threads of the API process,
its /healthz latency rose several-fold: the searches hold the GIL).

A worker that exits is started again (after a pause); each one exits by itself when
``serve`` dies (it watches its parent).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading

logger = logging.getLogger(__name__)

#: Pause before a worker that exited is started again.
RESTART_DELAY_S = 2.0
#: How long ``close`` waits for a worker to stop its runs before killing it.
STOP_TIMEOUT_S = 30.0
#: Scheduling priority the workers drop to (``nice``): on a host they share with the API,
#: a busy core goes to the API's requests first.
WORKER_NICENESS = 10


class WorkerProcesses:
    """``count`` worker processes on ``database_url``, kept running until :meth:`close`.

    Args:
        count: how many processes.
        database_url: the database they claim runs from (the API's).
        log_level: their log level.
    """

    def __init__(self, count: int, database_url: str, log_level: str = "info") -> None:
        # The URL goes by the environment: a password on a command line shows in ``ps``.
        self._env = {**os.environ, "PIPETUNE_DATABASE_URL": database_url}
        self._command = [sys.executable, "-m", "service.cli", "worker", "--parent-pid",
                         str(os.getpid()), "--log-level", log_level,
                         "--nice", str(WORKER_NICENESS)]
        self._processes: list[subprocess.Popen[bytes]] = []
        self._count = count
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="pipetune-workers",
                                         daemon=True)

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self._command, env=self._env)

    def start(self) -> None:
        self._processes = [self._spawn() for _ in range(self._count)]
        self._watcher.start()

    def _watch(self) -> None:
        while not self._stop.wait(RESTART_DELAY_S):
            for index, process in enumerate(self._processes):
                if process.poll() is not None and not self._stop.is_set():
                    logger.warning("worker %d exited (%s); starting another", process.pid,
                                   process.returncode)
                    self._processes[index] = self._spawn()

    def close(self) -> None:
        """Stop the workers: SIGTERM (runs stop at their next round), then a kill."""
        self._stop.set()
        if self._watcher.is_alive():
            self._watcher.join()
        for process in self._processes:
            process.terminate()
        for process in self._processes:
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
