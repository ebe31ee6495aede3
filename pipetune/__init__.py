"""pipetune for its users: a client of the tuning service, and tuned kernels as callables.

    import pipetune

    with pipetune.Client("http://127.0.0.1:8000") as client:
        result = client.tune("gemm", m=4096, n=4096, k=4096, dtype="float16")
        gemm = pipetune.load(client.kernel(result.kernel_hash))

    result = pipetune.tune("gemm", m=4096, n=4096, k=4096, dtype="float16")  # in process
    gemm = pipetune.load(result.kernel)

    gemm = pipetune.load(client.range_artifact(range_id))  # every m of a tuned range
"""

from __future__ import annotations

from typing import Any

from pipetune.client import AsyncClient, Client
from pipetune.errors import ApiError, BadRequest, Conflict, NotFound, PipetuneError, Unavailable
from pipetune.local import tune
from pipetune.results import TuneResult


def load(artifact: Any) -> Any:
    """A tuned kernel as a callable over torch tensors or CuPy arrays (needs CuPy and the
    CUDA driver bindings; see ``workers.load``): a ``LoadedKernel`` for a KernelArtifact,
    a ``RangeKernel`` for a RangeArtifact (its dict or JSON, ``"kind": "range"``), which
    launches each call's size on the kernel of its bucket."""
    from workers import load as load_kernel

    return load_kernel(artifact)


__all__ = ["ApiError", "AsyncClient", "BadRequest", "Client", "Conflict", "NotFound",
           "PipetuneError", "TuneResult", "Unavailable", "load", "tune"]
