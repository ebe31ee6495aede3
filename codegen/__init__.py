"""Code generation: sPrograms to CUDA C++ sources and their launch contracts.

``render(sprogram)`` is the one entry; every kernel is written by the pipeline skeleton
(``codegen.pipeline``) with an operator's hooks (``codegen.kernels``); the device
primitives live in ``codegen.cuda``. Importing ``codegen`` needs no GPU.
"""

from codegen.artifact import (
    KernelArtifact,
    RangeArtifact,
    RangeBucket,
    ScalarArg,
    SizeSlot,
    TensorArg,
    TensorMapArg,
    WorkspaceArg,
)
from codegen.render import (
    HOOKS,
    Unsupported,
    codegen_version,
    feasibility,
    has_renderer,
    lowering,
    register_hooks,
    render,
    unsupported,
)

__all__ = [
    "HOOKS",
    "KernelArtifact",
    "RangeArtifact",
    "RangeBucket",
    "ScalarArg",
    "SizeSlot",
    "TensorArg",
    "TensorMapArg",
    "Unsupported",
    "WorkspaceArg",
    "codegen_version",
    "feasibility",
    "has_renderer",
    "lowering",
    "register_hooks",
    "render",
    "unsupported",
]
