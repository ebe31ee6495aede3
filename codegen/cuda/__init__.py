"""The project's own Hopper device primitives, one module per family.

Each module registers small C++ snippets (one inline function per PTX instruction, named
for its meaning, with the PTX ISA section it implements); :func:`prelude` emits only the
ones a kernel uses. wgmma instruction wrappers are generated per shape by
:func:`codegen.cuda.wgmma.mma`.
"""

from codegen.cuda import (
    activations,
    base,
    cluster,
    convert,
    fences,
    ldstmatrix,
    mbarrier,
    regs,
    sfu,
    swizzle,
    tma,
    wgmma,
)
from codegen.cuda._snippet import (
    Snippet,
    prelude,
    prelude_rank,
    register,
    registered,
    snippet,
)
from codegen.cuda.swizzle import SWIZZLES, Swizzle
from codegen.cuda.wgmma import SmemMatrix

__all__ = [
    "SWIZZLES",
    "SmemMatrix",
    "Snippet",
    "Swizzle",
    "activations",
    "base",
    "cluster",
    "convert",
    "fences",
    "ldstmatrix",
    "mbarrier",
    "prelude",
    "prelude_rank",
    "register",
    "registered",
    "regs",
    "sfu",
    "snippet",
    "swizzle",
    "tma",
    "wgmma",
]
