"""Executors: where a batch of candidates is measured (see ``base.Executor``)."""

from workers.executors.base import Executor
from workers.executors.local_gpu_pool import LocalGpuPool, visible_devices

__all__ = ["Executor", "LocalGpuPool", "visible_devices"]
