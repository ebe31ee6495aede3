"""Code generation: sPrograms to CUDA C++ sources and their launch contracts.

``render(sprogram)`` is the one entry; the device primitives live in ``codegen.cuda`` and
the per-operator emitters in ``codegen.kernels``. Importing ``codegen`` needs no GPU.
"""

from codegen.artifact import KernelArtifact, ScalarArg, TensorArg, TensorMapArg
from codegen.kernels import Unsupported
from codegen.render import CODEGEN_VERSION, RENDERERS, has_renderer, render, unsupported

__all__ = [
    "CODEGEN_VERSION",
    "RENDERERS",
    "KernelArtifact",
    "ScalarArg",
    "TensorArg",
    "TensorMapArg",
    "Unsupported",
    "has_renderer",
    "render",
    "unsupported",
]
