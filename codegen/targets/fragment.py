"""The accumulator fragment both targets share: an m64 block is four warps of 16 rows.

A Hopper warpgroup MMA of 64 x N and four Ampere warps each running ``mma.sync m16n8k16``
over the block's N / 8 column groups leave the same values in the same registers: warp ``w`` holds
rows ``16 w + lane / 4`` and ``+ 8``, value ``4 g + 2 h + e`` at column
``8 g + 2 (lane % 4) + e`` of row half ``h`` (PTX ISA 9.7.15.5.1.1 "Register Fragments",
9.7.14.5.8 "Matrix Fragments for mma.m16n8k16"). So the softmax, the epilogues and every
operator's register math are written once, against this layout.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from codegen.pipeline.code import Code


class WarpgroupFragments:
    """The loops over an m64 accumulator fragment a thread holds (a target's mixin)."""

    @contextmanager
    def accumulator_rows(self, code: Code) -> Iterator[None]:
        """The rows of an m64 accumulator fragment this thread holds: per row block
        ``mi``, the halves ``h`` (rows ``lane / 4`` and ``+ 8`` of the warp's 16)."""
        c = code
        c("#pragma unroll")
        with c.block("for (int mi = 0; mi < ROW_BLOCKS; ++mi)"):
            c("#pragma unroll")
            with c.block("for (int h = 0; h < 2; ++h)"):
                yield

    def each_accumulator_value(self, code: Code, regs: str, element: str, body: list[str],
                               before: list[str] | None = None,
                               after: list[str] | None = None) -> None:
        """``body`` for each value of a fragment of ``regs`` registers a row block: per
        row, 8-column group ``g`` and ``element`` of the group's pair (value
        ``4 g + 2 h + element``); ``before`` and ``after`` once a row."""
        c = code
        with self.accumulator_rows(c):
            for line in before or []:
                c(line)
            c("#pragma unroll")
            with c.block(f"for (int g = 0; g < {regs} / 4; ++g)"):
                c("#pragma unroll")
                with c.block(f"for (int {element} = 0; {element} < 2; ++{element})"):
                    for line in body:
                        c(line)
            for line in after or []:
                c(line)


__all__ = ["WarpgroupFragments"]
