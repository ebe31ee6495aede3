"""Register rebalancing between warpgroups: ``setmaxnreg`` (sm_90a).

The producer warpgroup gives registers back (``dec``) and the consumer warpgroups take
them (``inc``). It takes effect only when the kernel has a register cap at entry
(``__launch_bounds__(threads, 1)``) and each warpgroup's role is one branch of a single
if/else; counts are multiples of 8 in [24, 256] (PTX ISA 9.7.17.1, "setmaxnreg").
"""

from __future__ import annotations

from codegen.cuda._snippet import Snippet, register

SETMAXNREG_MIN, SETMAXNREG_MAX, SETMAXNREG_STEP = 24, 256, 8

_CHECK = (
    '  static_assert(REGS % 8 == 0 && REGS >= 24 && REGS <= 256, '
    '"setmaxnreg takes multiples of 8 in [24, 256]");\n'
)

INC = Snippet(
    "setmaxnreg_inc",
    "// Raise this warpgroup's per-thread register budget to REGS (consumers).\n"
    "template <int REGS> __device__ __forceinline__ void setmaxnreg_inc() {\n"
    + _CHECK
    + '  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(REGS));\n'
    "}\n",
    section='9.7.17.1 "setmaxnreg"',
)

DEC = Snippet(
    "setmaxnreg_dec",
    "// Lower this warpgroup's per-thread register budget to REGS (the producer).\n"
    "template <int REGS> __device__ __forceinline__ void setmaxnreg_dec() {\n"
    + _CHECK
    + '  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(REGS));\n'
    "}\n",
    section='9.7.17.1 "setmaxnreg"',
)

#: This family's place in a prelude (:func:`codegen.cuda._snippet.register`).
PRELUDE_RANK = 80

register(INC, DEC, rank=PRELUDE_RANK)
