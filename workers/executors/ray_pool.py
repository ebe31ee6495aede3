"""RayGpuPool: an Executor over the GPUs of a Ray cluster, one long-lived actor per GPU.

Each actor owns what a :class:`~workers.LocalGpuPool` owns on one machine (the worker
subprocess with its deadline, kill and respawn), built in the actor's process by a
factory: on a GPU node, a pool of the one GPU Ray gave the actor. Actors are placed by a
custom resource named from the device's fingerprint key (:func:`resource_name`), which a
GPU node offers once per GPU of that kind, and each checks on start that the fingerprints
its workers report have the key it was placed for.

A batch is split over the actors that answer a ping: an actor whose node is gone waits,
unplaced, for a node of its key to come back (Ray restarts it there), and meanwhile gets
no work; a batch that finds no actor live waits for one (``node_wait_s``) rather than
spending its candidates as crashes while a node restarts. A chunk lost with its actor
(its node gone), or not answered within its jobs' deadlines, is given to another live
actor of the same key, at most ``redispatch`` times, else each of its jobs is a
``crash``: a job is recorded once, never twice (a late answer from an actor given up on
is dropped). The final interleaved re-timing runs on one actor, so that a speed ratio
never mixes two physical GPUs. Ray is imported only here (the optional ``fleet`` extra);
the caller connects (``ray.init``) first.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from workers.device import fingerprint_key
from workers.executors.base import Executor
from workers.protocol import Job, Measurement, MeasurementStatus

#: Makes the pool an actor owns, in the actor's process (picklable: Ray ships it).
PoolFactory = Callable[[], Executor]
#: How long a live actor may take to answer a ping (its own thread: even mid-measure).
PING_TIMEOUT_S = 5.0
#: Threads of an actor: a measure, a prepare and pings at once.
ACTOR_THREADS = 4
#: What a chunk may take beyond the sum of its jobs' deadlines (compiling, queueing).
CHUNK_MARGIN_S = 120.0
#: How long a batch that finds no actor live waits for one to come back by default.
NODE_WAIT_S = 60.0


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
        fingerprints = getattr(self.pool, "fingerprints", None)  # LocalGpuPool's property
        if self.device_key is None or fingerprints is None:
            return None
        keys = {fingerprint_key(f) for f in fingerprints if f is not None}
        if keys == {self.device_key}:
            return None
        return f"placed for device {self.device_key[:12]}, found {sorted(k[:12] for k in keys)}"

    def capacity(self) -> int:
        return self.pool.capacity()

    def batch_size(self) -> int:
        return self.pool.batch_size()

    def prepare(self, jobs: list[Job]) -> None:
        self.pool.prepare(jobs)

    def warm(self, jobs: list[Job]) -> None:
        self.pool.warm(jobs)

    def node(self) -> str:
        """The address of the Ray node this actor lives on."""
        import ray

        return str(ray.util.get_node_ip_address())

    def measure(self, jobs: list[Job]) -> tuple[list[Measurement], float]:
        """The measurements, and the seconds the pool took (the rest of a chunk's round
        trip is the fleet's own cost)."""
        started = time.perf_counter()
        measured = self.pool.measure(jobs)
        return measured, time.perf_counter() - started

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
        node_wait_s: how long a batch that finds no actor live waits for one (a node of
            the key coming back) before its jobs are crashes.
        gpus_per_actor: the GPUs Ray gives each actor (it sets the actor's
            ``CUDA_VISIBLE_DEVICES`` to them); 0 for pools that need none (simulated).

    Raises:
        RuntimeError: Ray is not connected.
        ValueError: an actor's GPU is not of ``device_key``.
    """

    def __init__(self, pool_factory: PoolFactory, *, actors: int,
                 device_key: str | None = None, redispatch: int = 1,
                 gpus_per_actor: int = 0, node_wait_s: float = NODE_WAIT_S) -> None:
        import ray

        if not ray.is_initialized():
            raise RuntimeError("RayGpuPool needs a Ray connection: ray.init(address=...)")
        # Threaded actors: a ping or a prepare (compiling the next batch) runs while a
        # measure does; the pool serialises its own measures.
        options: dict[str, Any] = {"num_cpus": 0, "num_gpus": gpus_per_actor,
                                   "max_restarts": -1, "max_concurrency": ACTOR_THREADS}
        if device_key is not None:
            options["resources"] = {resource_name(device_key): 1}
        remote = ray.remote(_GpuActor).options(**options)
        self._actors = [remote.remote(pool_factory, device_key) for _ in range(actors)]
        self._redispatch = redispatch
        self._node_wait_s = node_wait_s
        #: chunks answered, their round trips and their actors' own measuring, in seconds.
        self._dispatch = {"chunks": 0, "round_trip_s": 0.0, "actor_s": 0.0}
        self._lock = threading.Lock()
        problems = [p for p in ray.get([a.mismatch.remote() for a in self._actors]) if p]
        if problems:
            self.close()
            raise ValueError(problems[0])
        self._capacities = ray.get([a.capacity.remote() for a in self._actors])
        self._batch_sizes = ray.get([a.batch_size.remote() for a in self._actors])

    def capacity(self) -> int:
        return sum(self._capacities)

    def batch_size(self) -> int:
        """The actors' pools' batch widths together (a GPU's pool compiles a batch as wide
        as its node's cores while it measures)."""
        return sum(self._batch_sizes)

    def prepare(self, jobs: Sequence[Job]) -> None:
        """Each live actor starts compiling the chunk of ``jobs`` it will measure (the same
        split as :meth:`measure`'s while no actor is lost); nothing is waited for."""
        live = self.live_actors()
        for actor, indices in self._chunks(len(jobs), live):
            self._actors[actor].prepare.remote([jobs[i] for i in indices])

    def warm(self, jobs: Sequence[Job] = ()) -> None:
        """Each live actor's pool started (its GPU worker, its compile pool) and warmed
        with ``jobs`` (see :meth:`Executor.warm`)."""
        import ray

        ray.get([self._actors[a].warm.remote(list(jobs)) for a in self.live_actors()])

    def live_actors(self, timeout_s: float = PING_TIMEOUT_S) -> list[int]:
        """The actors that answer a ping within ``timeout_s`` (an actor waiting for its
        node to come back does not)."""
        import ray

        pings = {self._actors[a].capacity.remote(): a for a in range(len(self._actors))}
        answered, _ = ray.wait(list(pings), num_returns=len(pings), timeout=timeout_s)
        live = []
        for ref in answered:
            with contextlib.suppress(Exception):  # an actor that died answers with an error
                ray.get(ref)
                live.append(pings[ref])
        return sorted(live)

    def actor_nodes(self) -> list[str]:
        """The nodes the live actors are on, one entry per actor (where the work goes)."""
        import ray

        with self._lock:
            return ray.get([self._actors[a].node.remote() for a in self.live_actors()])

    def measure(self, jobs: Sequence[Job]) -> list[Measurement]:
        """The jobs split over the live actors, in order; see the module docstring. Calls
        are serialised (runs of one device share the pool; each actor's pool measures one
        batch at a time, while its other threads answer pings and prepares)."""
        with self._lock:
            return self._measure(jobs)

    def _measure(self, jobs: Sequence[Job]) -> list[Measurement]:
        import ray
        from ray.exceptions import RayActorError

        live = self._await_live() if jobs else []
        if jobs and not live:
            error = (f"no GPU actor of this key is live (every node of its kind is gone, "
                     f"none back within {self._node_wait_s:.0f} s)")
            return [Measurement(MeasurementStatus.CRASH, error=error) for _ in jobs]
        results: list[Measurement | None] = [None] * len(jobs)
        pending: dict[Any, tuple[int, list[int], int, float]] = {}

        sent: dict[Any, float] = {}

        def send(actor: int, indices: list[int], attempt: int) -> None:
            ref = self._actors[actor].measure.remote([jobs[i] for i in indices])
            wait_s = sum(jobs[i].deadline_s for i in indices) + CHUNK_MARGIN_S
            pending[ref] = (actor, indices, attempt, time.monotonic() + wait_s)
            sent[ref] = time.perf_counter()

        for actor, indices in self._chunks(len(jobs), live):
            send(actor, indices, 0)
        while pending:
            ref, late = _next_done(pending)
            actor, indices, attempt, _ = pending.pop(ref)
            try:
                if late:
                    raise TimeoutError("no answer within the jobs' deadlines "
                                       f"(+{CHUNK_MARGIN_S:.0f} s)")
                measured, actor_s = ray.get(ref)
                self._count_dispatch(time.perf_counter() - sent[ref], actor_s)
            except (RayActorError, TimeoutError) as exc:  # the actor (its node) is gone
                live = [a for a in live if a != actor]
                if attempt < self._redispatch and live:
                    send(live[0], indices, attempt + 1)
                    continue
                error = f"lost with its GPU's node: {type(exc).__name__}: {exc}"[:300]
                measured = [Measurement(MeasurementStatus.CRASH, error=error)] * len(indices)
            for i, result in zip(indices, measured, strict=True):
                results[i] = result
        return [r for r in results if r is not None]

    def _count_dispatch(self, round_trip_s: float, actor_s: float) -> None:
        self._dispatch["chunks"] += 1
        self._dispatch["round_trip_s"] += round_trip_s
        self._dispatch["actor_s"] += actor_s

    def dispatch_overhead(self) -> dict[str, float]:
        """What measuring through the actors has cost beyond the pools' own measuring:
        chunks answered, seconds of round trip and of the actors' measuring, and the
        mean overhead per chunk (serialising jobs and results, Ray's scheduling)."""
        d = dict(self._dispatch)
        d["overhead_per_chunk_s"] = ((d["round_trip_s"] - d["actor_s"]) / d["chunks"]
                                     if d["chunks"] else 0.0)
        return d

    def _await_live(self) -> list[int]:
        """The live actors; while there are none, pings again until ``node_wait_s`` has
        passed (an actor of a restarted node answers once Ray has placed it again)."""
        deadline = time.monotonic() + self._node_wait_s
        live = self.live_actors()
        while not live and time.monotonic() < deadline:
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
            live = self.live_actors(min(PING_TIMEOUT_S, max(0.1, deadline - time.monotonic())))
        return live

    def retime_interleaved(self, jobs: Sequence[Job], rounds: int = 3) -> list[Measurement]:
        """The base class's interleaved rounds, all on one actor (one physical GPU)."""
        import ray
        from ray.exceptions import RayActorError

        with self._lock:
            for actor in self.live_actors():
                try:
                    return ray.get(self._actors[actor].retime.remote(list(jobs), rounds))
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

    def _chunks(self, count: int, actors: list[int]) -> list[tuple[int, list[int]]]:
        """Contiguous chunks of ``count`` jobs, one per actor of ``actors``, sized by its
        batch width."""
        weights = self._batch_sizes
        total = max(1, sum(weights[a] for a in actors))
        chunks, start = [], 0
        for actor in actors:
            size = -(-count * weights[actor] // total)
            if start < count:
                chunks.append((actor, list(range(start, min(count, start + size)))))
            start += size
        return chunks


def _next_done(pending: dict[Any, tuple[int, list[int], int, float]]) -> tuple[Any, bool]:
    """The next chunk that answered, or whose deadline passed first (then ``late``)."""
    import ray

    soonest = min(deadline for *_, deadline in pending.values())
    done, _ = ray.wait(list(pending), num_returns=1,
                       timeout=max(0.0, soonest - time.monotonic()))
    if done:
        return done[0], False
    return next(ref for ref, (*_, deadline) in pending.items() if deadline == soonest), True
