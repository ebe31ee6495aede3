"""Which executor measures a device's runs; one per device, shared by its runs.

A simulated device (``sim:*``) is measured by a :class:`~workers.SimulatedDevice` of its
model; a local GPU (``cuda:N``) by a :class:`~workers.LocalGpuPool` with one worker pinned
to that GPU, whose compiler keeps its cubins under the data directory. Executors are
created on first use (a GPU pool starts its worker then) and closed together.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from service.runs.devices import ResolvedDevice, cuda_index
from workers import Executor, SimulatedDevice

#: Makes the executor of a local GPU (tests inject stand-ins).
GpuPoolFactory = Callable[[ResolvedDevice], Executor]


def local_gpu_pool(
    device: ResolvedDevice, cubin_dir: Path | None = None, batch_size: int | None = None
) -> Executor:
    """A LocalGpuPool with one worker on ``device`` (``cuda:N``)."""
    from codegen import CODEGEN_VERSION
    from workers import LocalGpuPool, ParallelCompiler
    from workers.executors import visible_devices

    visible = visible_devices()
    index = cuda_index(device)
    return LocalGpuPool(
        [visible[index]],
        compiler=ParallelCompiler(cache_dir=cubin_dir),
        codegen_version=CODEGEN_VERSION,
        batch_size=batch_size,
    )


class ExecutorRegistry:
    """Executors by device key, created on first use and closed together.

    Args:
        simulated_capacity: batch width of each simulated device.
        gpu_pool_factory: makes the executor of a ``cuda:N`` device (default: a
            :func:`local_gpu_pool` with ``cubin_dir`` and ``gpu_batch_size``).
        cubin_dir: where GPU pools keep compiled kernels (default: the compiler's).
        gpu_batch_size: candidates per round on a GPU (default: one per CPU core).
    """

    def __init__(
        self,
        simulated_capacity: int = 8,
        *,
        gpu_pool_factory: GpuPoolFactory | None = None,
        cubin_dir: Path | None = None,
        gpu_batch_size: int | None = None,
    ) -> None:
        self.simulated_capacity = simulated_capacity
        self._gpu_pool_factory = gpu_pool_factory or (
            lambda device: local_gpu_pool(device, cubin_dir, gpu_batch_size)
        )
        self._executors: dict[str, Executor] = {}
        self._lock = threading.Lock()

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
        )

    def get(self, device: ResolvedDevice) -> Executor:
        with self._lock:
            executor = self._executors.get(device.key)
            if executor is None:
                if device.kind == "cuda":
                    executor = self._gpu_pool_factory(device)
                else:
                    executor = SimulatedDevice(device.model, capacity=self.simulated_capacity)
                self._executors[device.key] = executor
            return executor

    def describe(self) -> dict[str, dict[str, object]]:
        """Executors in use, by device key: kind and capacity."""
        with self._lock:
            return {
                key: {"executor": type(e).__name__, "capacity": e.capacity()}
                for key, e in self._executors.items()
            }

    def close(self) -> None:
        with self._lock:
            for executor in self._executors.values():
                executor.close()
            self._executors.clear()
