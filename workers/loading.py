"""``load(artifact)``: the callable of a tuned kernel, or of the kernels of a size range.

One entry point for both kinds of artifact a user gets back: a ``KernelArtifact`` loads as
a :class:`~workers.kernels.LoadedKernel`, a ``RangeArtifact`` as a
:class:`~workers.ranges.RangeKernel` (which launches each call's size on its bucket's
kernel).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codegen.artifact import RangeArtifact
from workers.kernels import LoadedKernel, as_artifact, plain_artifact
from workers.ranges import RangeKernel, as_range_artifact


def load(artifact: Any) -> Any:
    """A callable that runs the kernel of ``artifact`` on CuPy arrays or torch tensors.

    Args:
        artifact: a ``KernelArtifact``, its ``to_dict()``, its JSON text, or the JSON body
            of ``GET /v1/kernels/{hash}``: a :class:`LoadedKernel`. A ``RangeArtifact``
            (the kernels of a size range), its dict (``"kind": "range"``) or JSON: a
            :class:`workers.ranges.RangeKernel`, which launches the kernel of each call's
            size.

    Raises:
        ValueError: not an artifact of a known operator.
    """
    artifact = plain_artifact(artifact)
    if isinstance(artifact, RangeArtifact) or (isinstance(artifact, Mapping)
                                               and artifact.get("kind") == "range"):
        return RangeKernel(as_range_artifact(artifact))
    return LoadedKernel(as_artifact(artifact))


__all__ = ["load"]
