"""GPU measurement engine: compile, verify and time candidate kernels, isolating faults.

``workers`` receives plain data (a ``KernelArtifact``, a workload and its tensor contract)
and never imports ``service``; of ``scheduler_search`` it reads the operator specs' tensor
contract (``scheduler_search.ops``) at import time, and only the simulated device's default
estimator calls the cost model, lazily. CuPy, PyTorch and the CUDA bindings are imported
lazily inside functions, so this package imports on a machine without a GPU.

``load(artifact)`` (``workers.loading``) is the user's side: it runs a tuned kernel on CuPy
arrays or torch tensors; for the kernels of a size range (a ``RangeArtifact``) it returns a
``RangeKernel`` (``workers.ranges``), which launches each call's size on its bucket's kernel.
"""

from workers.compile import CompileResult, ParallelCompiler
from workers.device import fingerprint_key, read_fingerprint
from workers.executors import Executor, LocalGpuPool, SimulatedDevice
from workers.kernels import KernelArgumentError, LoadedKernel
from workers.loading import load
from workers.protocol import (
    PROTOCOL_VERSION,
    Job,
    Measurement,
    MeasurementStatus,
    TimingConfig,
)
from workers.ranges import RangeKernel

__all__ = [
    "PROTOCOL_VERSION",
    "CompileResult",
    "Executor",
    "Job",
    "KernelArgumentError",
    "LoadedKernel",
    "LocalGpuPool",
    "Measurement",
    "MeasurementStatus",
    "ParallelCompiler",
    "RangeKernel",
    "SimulatedDevice",
    "TimingConfig",
    "fingerprint_key",
    "load",
    "read_fingerprint",
]
