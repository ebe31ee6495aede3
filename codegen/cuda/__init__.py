"""The project's own device primitives, one module per family.

Each module registers small C++ snippets (one inline function per PTX instruction, named
for its meaning, with the PTX ISA section it implements); :func:`prelude` emits only the
ones a kernel uses. The families only one architecture has live with its target (Hopper's
asynchronous MMA, setmaxnreg, clusters and stmatrix: :mod:`codegen.targets.hopper`).
"""

from codegen.cuda import (
    activations,
    base,
    convert,
    fences,
    mbarrier,
    reductions,
    sfu,
    swizzle,
    tma,
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

__all__ = [
    "SWIZZLES",
    "Snippet",
    "Swizzle",
    "activations",
    "base",
    "convert",
    "fences",
    "mbarrier",
    "prelude",
    "prelude_rank",
    "reductions",
    "register",
    "registered",
    "sfu",
    "snippet",
    "swizzle",
    "tma",
]
