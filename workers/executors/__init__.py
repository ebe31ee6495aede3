"""Executors: where a batch of candidates is measured (see ``base.Executor``)."""

from workers.executors.base import Executor
from workers.executors.local_gpu_pool import LocalGpuPool, visible_devices
from workers.executors.ray_pool import RayGpuPool
from workers.executors.simulated import SimulatedDevice, cost_model_estimator

__all__ = [
    "Executor",
    "LocalGpuPool",
    "RayGpuPool",
    "SimulatedDevice",
    "cost_model_estimator",
    "visible_devices",
]
