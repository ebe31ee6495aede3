"""RayGpuPool: an Executor over the GPUs of a Ray cluster, one long-lived actor per GPU.

Each actor owns what a :class:`~workers.LocalGpuPool` owns on one machine (the worker
subprocess with its deadline, kill and respawn), built in the actor's process by a
factory: on a GPU node, a pool of the one GPU Ray gave the actor. Actors are placed by a
custom resource named from the device's fingerprint key (:func:`resource_name`), which a
GPU node offers once per GPU of that kind, and each checks on start that the fingerprints
its workers report have the key it was placed for.

A batch is split over the actors; a chunk lost with its actor (its node gone) is given
to another actor of the same key, at most ``redispatch`` times, else each of its jobs is
a ``crash``: a job is recorded once, never twice. The final interleaved re-timing runs on
one actor, so that a speed ratio never mixes two physical GPUs. Ray is imported only
here (the optional ``fleet`` extra); the caller connects (``ray.init``) first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from workers.device import fingerprint_key
from workers.executors.base import Executor
from workers.protocol import Job, Measurement, MeasurementStatus

#: Makes the pool an actor owns, in the actor's process (picklable: Ray ships it).
PoolFactory = Callable[[], Executor]


def resource_name(device_key: str) -> str:
    """The Ray custom resource a node offers once per GPU of this fingerprint key."""
    return f"pipetune_gpu_{device_key[:16]}"


def connect(address: str) -> None:
    """Join the Ray cluster at ``address`` (``host:port``, or ``auto``), once per process."""
    import ray

    if not ray.is_initialized():
        ray.init(address=address or "auto", log_to_driver=False, configure_logging=False)


def offered(device_key: str) -> int:
    """How many GPUs of ``device_key`` the connected cluster's live nodes offer."""
    import ray

    return int(ray.cluster_resources().get(resource_name(device_key), 0))


class _GpuActor:
    """The body of one GPU's actor: its pool, and the key it must have."""

    def __init__(self, pool_factory: PoolFactory, device_key: str | None) -> None:
        self.pool = pool_factory()
        self.device_key = device_key

    def mismatch(self) -> str | None:
        """Why this actor's GPU is not of the key it was placed for, or None."""
        fingerprints = getattr(self.pool, "fingerprints", None)
        if self.device_key is None or fingerprints is None:
            return None
        keys = {fingerprint_key(f) for f in fingerprints() if f is not None}
        if keys == {self.device_key}:
            return None
        return f"placed for device {self.device_key[:12]}, found {sorted(k[:12] for k in keys)}"

    def capacity(self) -> int:
        return self.pool.capacity()

    def measure(self, jobs: list[Job]) -> list[Measurement]:
        return self.pool.measure(jobs)

    def retime(self, jobs: list[Job], rounds: int) -> list[Measurement]:
        return self.pool.retime_interleaved(jobs, rounds)

    def close(self) -> None:
        self.pool.close()


class RayGpuPool(Executor):
    """``actors`` GPUs of one kind on a Ray cluster (see the module docstring).

    Args:
        pool_factory: makes an actor's pool in its process.
        actors: how many GPU actors (one per GPU).
        device_key: the fingerprint key of the GPUs: actors are placed on nodes that
            offer its resource and check their GPU has it (None: anywhere, unchecked).
        redispatch: how many times a chunk lost with its actor is given to another.
        gpus_per_actor: the GPUs Ray gives each actor (it sets the actor's
            ``CUDA_VISIBLE_DEVICES`` to them); 0 for pools that need none (simulated).

    Raises:
        RuntimeError: Ray is not connected.
        ValueError: an actor's GPU is not of ``device_key``.
    """

    def __init__(self, pool_factory: PoolFactory, *, actors: int,
                 device_key: str | None = None, redispatch: int = 1,
                 gpus_per_actor: int = 0) -> None:
        import ray

        if not ray.is_initialized():
            raise RuntimeError("RayGpuPool needs a Ray connection: ray.init(address=...)")
        options: dict[str, Any] = {"num_cpus": 0, "num_gpus": gpus_per_actor,
                                   "max_restarts": -1}
        if device_key is not None:
            options["resources"] = {resource_name(device_key): 1}
        remote = ray.remote(_GpuActor).options(**options)
        self._actors = [remote.remote(pool_factory, device_key) for _ in range(actors)]
        self._redispatch = redispatch
        problems = [p for p in ray.get([a.mismatch.remote() for a in self._actors]) if p]
        if problems:
            self.close()
            raise ValueError(problems[0])
        self._capacities = ray.get([a.capacity.remote() for a in self._actors])

    def capacity(self) -> int:
        return sum(self._capacities)

    def measure(self, jobs: Sequence[Job]) -> list[Measurement]:
        """The jobs split over the actors, in order; see the module docstring for loss."""
        import ray
        from ray.exceptions import RayActorError

        results: list[Measurement | None] = [None] * len(jobs)
        lost: set[int] = set()
        pending: dict[Any, tuple[int, list[int], int]] = {}

        def send(actor: int, indices: list[int], attempt: int) -> None:
            ref = self._actors[actor].measure.remote([jobs[i] for i in indices])
            pending[ref] = (actor, indices, attempt)

        for actor, indices in self._chunks(len(jobs)):
            send(actor, indices, 0)
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            actor, indices, attempt = pending.pop(ref)
            try:
                measured = ray.get(ref)
            except RayActorError as exc:  # the actor (its node) is gone mid-chunk
                lost.add(actor)
                others = [a for a in range(len(self._actors)) if a not in lost]
                if attempt < self._redispatch and others:
                    send(others[0], indices, attempt + 1)
                    continue
                error = f"lost with its GPU's node: {type(exc).__name__}"
                measured = [Measurement(MeasurementStatus.CRASH, error=error)] * len(indices)
            for i, result in zip(indices, measured, strict=True):
                results[i] = result
        return [r for r in results if r is not None]

    def retime_interleaved(self, jobs: Sequence[Job], rounds: int = 3) -> list[Measurement]:
        """The base class's interleaved rounds, all on one actor (one physical GPU)."""
        import ray
        from ray.exceptions import RayActorError

        for actor in self._actors:
            try:
                return ray.get(actor.retime.remote(list(jobs), rounds))
            except RayActorError:
                continue
        return [Measurement(MeasurementStatus.CRASH, error="no GPU actor is left")
                for _ in jobs]

    def close(self) -> None:
        import ray

        for actor in self._actors:
            with contextlib.suppress(Exception):  # an actor already gone closes nothing
                ray.get(actor.close.remote(), timeout=30)
            ray.kill(actor)
        self._actors = []

    def _chunks(self, count: int) -> list[tuple[int, list[int]]]:
        """Contiguous chunks of ``count`` jobs, one per actor, sized by its capacity."""
        total = max(1, self.capacity())
        chunks, start = [], 0
        for actor, capacity in enumerate(self._capacities):
            size = -(-count * capacity // total)
            if start < count:
                chunks.append((actor, list(range(start, min(count, start + size)))))
            start += size
        return chunks
