"""The cost model's seeds of a GPU run, computed in another process while the search starts.

Ranking a whole space (``scheduler_search.search.cost_model_seeds``) takes seconds of CPU
(processes over shards of the space's tiles: :func:`rank_jobs`); the first batches need
not wait for it. :class:`SeedProcess` starts the ranking
in a child process (``workers.spawn``: the caller's script is never imported) and is
polled by the search driver (``seed_source``): ``None`` until the seeds are there, then
the seeds, once.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from scheduler_search.hardware.model import Device
from scheduler_search.ops import OperatorSpec
from workers.spawn import Child

logger = logging.getLogger(__name__)

#: The most processes a run's ranking takes.
MAX_RANK_JOBS = 8


def rank_jobs() -> int:
    """Processes the ranking may take: half the machine's cores, at most 8 (the rest
    compile and feed the GPU workers meanwhile); one on a small machine."""
    return max(1, min(MAX_RANK_JOBS, (os.cpu_count() or 1) // 2))


def _seed_worker(conn: Any, spec: OperatorSpec, device: Device, options: dict[str, Any]) -> None:
    """Process entry: rank and send ``("ok", seeds)`` or ``("error", text)``."""
    try:
        from codegen import feasibility
        from scheduler_search.search import cost_model_seeds

        feasible = feasibility(spec.op, device)
        options = {"jobs": rank_jobs(), **options}
        conn.send(("ok", cost_model_seeds(spec, device, feasible=feasible, **options)))
    except Exception as exc:  # reported to the parent, which searches without seeds
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


class SeedProcess:
    """The seeds of ``spec`` on ``device`` being computed in a child process.

    Args:
        options: keyword arguments of ``cost_model_seeds`` (``structures``,
            ``calibration``, ...).
    """

    def __init__(self, spec: OperatorSpec, device: Device, **options: Any) -> None:
        self._process = Child(_seed_worker, (spec, device, options), name="pipetune-seeds")
        self._conn = self._process.conn
        self._done = False

    def poll(self) -> Sequence[dict[str, Any]] | None:
        """The seeds once ready (then never again: ``[]``), else None.

        Raises:
            RuntimeError: the ranking failed or its process died.
        """
        if self._done:
            return []
        try:
            ready = self._conn.poll()
        except (EOFError, OSError):
            ready = True
        if not ready:
            if self._process.is_alive():
                return None
            ready = self._conn.poll()
        self._done = True
        try:
            status, payload = self._conn.recv() if ready else ("error", "no answer")
        except (EOFError, OSError) as exc:
            status, payload = "error", f"{type(exc).__name__}"
        self.close()
        if status != "ok":
            raise RuntimeError(f"cost-model seeding failed: {payload}")
        return payload

    def close(self) -> None:
        """Stop the process if it still runs (a search that ended before its seeds)."""
        if self._process.is_alive():
            self._process.terminate()
        self._process.join(5)
        self._conn.close()
