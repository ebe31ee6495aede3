"""Which executor measures a device's runs; one per device, shared by its runs.

A simulated device (``sim:*``) is measured by a :class:`~workers.SimulatedDevice` of its
model; a local GPU (``cuda:N``) by a :class:`~workers.LocalGpuPool` with one worker pinned
to that GPU, whose compiler keeps its cubins under the data directory; a fleet device
(``fleet:*``, only where ``PIPETUNE_EXECUTOR=ray``) by a
:class:`~workers.executors.ray_pool.RayGpuPool` with one actor per GPU of its kind that the
Ray cluster offers. Executors are created on first use (a GPU pool starts its worker then)
and closed together.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from service.db.fleet import FleetDevice
from service.runs import fleet
from service.runs.devices import DeviceError, ResolvedDevice, cuda_index
from workers import Executor, SimulatedDevice

#: Makes the executor of a local GPU (tests inject stand-ins).
GpuPoolFactory = Callable[[ResolvedDevice], Executor]


def local_gpu_pool(
    device: ResolvedDevice, cubin_dir: Path | None = None, batch_size: int | None = None
) -> Executor:
    """A LocalGpuPool with one worker on ``device`` (``cuda:N``)."""
    from codegen import codegen_version
    from workers import LocalGpuPool, ParallelCompiler
    from workers.executors import visible_devices

    visible = visible_devices()
    index = cuda_index(device)
    return LocalGpuPool(
        [visible[index]],
        compiler=ParallelCompiler(cache_dir=cubin_dir),
        codegen_version=codegen_version(),
        batch_size=batch_size,
    )


def actor_gpu_pool(compile_farm: bool = False) -> Executor:
    """What a fleet actor measures with, built in its process: a LocalGpuPool of the GPU
    Ray gave the actor (its ``CUDA_VISIBLE_DEVICES``), compiling on the cluster's compile
    farm where it has one, else on the node's own cores."""
    from codegen import codegen_version
    from workers import LocalGpuPool, ParallelCompiler
    from workers.compile_farm import RayCompiler

    compiler = RayCompiler() if compile_farm else ParallelCompiler()
    return LocalGpuPool(compiler=compiler, codegen_version=codegen_version())


def ray_fleet_pool(device: ResolvedDevice, ray_address: str,
                   simulated_capacity: int = 8) -> Executor:
    """A RayGpuPool over every GPU of ``device``'s kind the cluster offers: actors placed
    by the kind's resource, compiling on the compile farm where the cluster has one; a
    simulated kind's actors measure with the cost model.

    Raises:
        DeviceError: no live node of the cluster offers the kind.
    """
    from workers.compile_farm import farm_offered
    from workers.executors.ray_pool import RayGpuPool, connect, offered

    connect(ray_address)
    placement = fleet.placement_key(device.identity)
    actors = offered(placement)
    if actors < 1:
        raise DeviceError(f"no live node of the Ray cluster offers {device.name}")
    if device.simulated:
        factory: Callable[[], Executor] = functools.partial(
            SimulatedDevice, device.model, capacity=simulated_capacity)
        return RayGpuPool(factory, actors=actors, device_key=placement)
    factory = functools.partial(actor_gpu_pool, compile_farm=farm_offered() > 0)
    return RayGpuPool(factory, actors=actors, device_key=placement, gpus_per_actor=1)


def offered_fleet_keys(devices: Iterable[FleetDevice], ray_address: str) -> frozenset[str]:
    """The registered fleet devices whose kind some live node of the cluster offers."""
    from workers.executors.ray_pool import connect, offered

    connect(ray_address)
    return frozenset(d.key for d in devices if offered(fleet.placement_key(d.identity)) > 0)


class ExecutorRegistry:
    """Executors by device key, created on first use and closed together.

    Args:
        simulated_capacity: batch width of each simulated device.
        gpu_pool_factory: makes the executor of a ``cuda:N`` device (default: a
            :func:`local_gpu_pool` with ``cubin_dir`` and ``gpu_batch_size``).
        cubin_dir: where GPU pools keep compiled kernels (default: the compiler's).
        gpu_batch_size: candidates per round on a GPU (default: one per CPU core).
        ray_address: the Ray cluster whose fleet devices this process measures (None:
            none; ``""``: ``auto``).
    """

    def __init__(
        self,
        simulated_capacity: int = 8,
        *,
        gpu_pool_factory: GpuPoolFactory | None = None,
        cubin_dir: Path | None = None,
        gpu_batch_size: int | None = None,
        ray_address: str | None = None,
    ) -> None:
        self.simulated_capacity = simulated_capacity
        self._gpu_pool_factory = gpu_pool_factory or (
            lambda device: local_gpu_pool(device, cubin_dir, gpu_batch_size)
        )
        self.ray_address = ray_address
        self._executors: dict[str, Executor] = {}
        self._lock = threading.Lock()
        #: One lock per device key while its executor is made (a GPU pool or a fleet's
        #: actors take seconds to start; other devices' executors are not held up).
        self._making: dict[str, threading.Lock] = {}

    @classmethod
    def from_settings(
        cls, settings: object, gpu_pool_factory: GpuPoolFactory | None = None
    ) -> ExecutorRegistry:
        """The registry a service process uses (``service.core.config.Settings``)."""
        data_dir = getattr(settings, "data_dir", None)
        return cls(
            getattr(settings, "simulated_capacity", 8),
            gpu_pool_factory=gpu_pool_factory,
            cubin_dir=Path(data_dir) / "cubin" if data_dir is not None else None,
            gpu_batch_size=getattr(settings, "gpu_batch_size", 0) or None,
            ray_address=(getattr(settings, "ray_address", "")
                         if getattr(settings, "executor", "local") == "ray" else None),
        )

    def fleet_keys(self, devices: Iterable[FleetDevice]) -> frozenset[str]:
        """Of the registered fleet ``devices``, the keys this process measures: those the
        cluster offers, where it has one (none otherwise, and Ray is never imported)."""
        if self.ray_address is None:
            return frozenset()
        return offered_fleet_keys(devices, self.ray_address)

    def get(self, device: ResolvedDevice) -> Executor:
        """``device``'s executor, made on first use (once, whoever asks meanwhile)."""
        with self._lock:
            executor = self._executors.get(device.key)
            if executor is not None:
                return executor
            making = self._making.setdefault(device.key, threading.Lock())
        with making:
            with self._lock:
                executor = self._executors.get(device.key)
            if executor is None:
                executor = self._make(device)
                with self._lock:
                    self._executors[device.key] = executor
            return executor

    def warm(self, device: ResolvedDevice) -> None:
        """``device``'s executor made and warmed (started, then the warm-up jobs of
        :func:`service.runs.jobs.warm_up_jobs` measured once), before any run needs it."""
        from service.runs.jobs import warm_up_jobs

        executor = self.get(device)
        executor.warm([] if device.simulated else warm_up_jobs(device.model))

    def _make(self, device: ResolvedDevice) -> Executor:
        if device.kind == "cuda":
            return self._gpu_pool_factory(device)
        if device.kind == "fleet":
            if self.ray_address is None:
                raise DeviceError(f"{device.name}: this process measures no fleet devices "
                                  "(PIPETUNE_EXECUTOR=ray)")
            return ray_fleet_pool(device, self.ray_address, self.simulated_capacity)
        return SimulatedDevice(device.model, capacity=self.simulated_capacity)

    def running(self, key: str) -> Executor | None:
        """The executor made for device ``key``, if one has been (none is made here)."""
        with self._lock:
            return self._executors.get(key)

    def describe(self) -> dict[str, dict[str, object]]:
        """Executors in use, by device key: kind, capacity, and a fleet's dispatch cost."""
        with self._lock:
            executors = dict(self._executors)
        described: dict[str, dict[str, object]] = {}
        for key, e in executors.items():
            described[key] = {"executor": type(e).__name__, "capacity": e.capacity()}
            dispatch = getattr(e, "dispatch_overhead", None)
            if dispatch is not None:
                described[key]["dispatch"] = dispatch()
        return described

    def close(self) -> None:
        with self._lock:
            for executor in self._executors.values():
                executor.close()
            self._executors.clear()
