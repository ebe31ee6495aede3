"""Which executor measures a device's runs; one per device, shared by its runs."""

from __future__ import annotations

import threading

from service.runs.devices import ResolvedDevice
from workers import Executor, SimulatedDevice


class ExecutorRegistry:
    """Executors by device key, created on first use and closed together.

    In this version every device is measured by a :class:`SimulatedDevice` of its model;
    a ``LocalGpuPool`` takes over ``cuda:N`` devices once code generation exists.

    Args:
        simulated_capacity: batch width of each simulated device.
    """

    def __init__(self, simulated_capacity: int = 8) -> None:
        self.simulated_capacity = simulated_capacity
        self._executors: dict[str, Executor] = {}
        self._lock = threading.Lock()

    def get(self, device: ResolvedDevice) -> Executor:
        with self._lock:
            executor = self._executors.get(device.key)
            if executor is None:
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
