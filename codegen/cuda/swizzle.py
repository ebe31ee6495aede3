"""Shared-memory swizzles: one description used by TMA (tensor-map swizzle), the MMA
(descriptor layout type) and the kernel's own address arithmetic (stmatrix staging).

An N-byte swizzle (N in 32, 64, 128) is CuTe's ``Swizzle<B, 4, 3>`` with ``2**B = N / 16``:
within each repeat of 8 rows x N bytes, the 16-byte chunk index (address bits 4..4+B)
is XORed with the row index (bits 7..7+B). A tile row is N bytes wide; the repeat pattern
starts on an ``8 * N``-byte boundary, which is how buffers are aligned (PTX ISA 9.7.15.5.1.2,
"Shared Memory Matrix Layout"; CUDA driver API, ``CUtensorMapSwizzle``).
"""

from __future__ import annotations

from dataclasses import dataclass

from codegen.cuda._snippet import Snippet, register


@dataclass(frozen=True)
class Swizzle:
    """An N-byte shared-memory swizzle."""

    span_bytes: int

    def __post_init__(self) -> None:
        if self.span_bytes not in (32, 64, 128):
            raise ValueError(f"no {self.span_bytes}-byte swizzle (32, 64 or 128)")

    @property
    def bits(self) -> int:
        """B of Swizzle<B, 4, 3>: log2 of the 16-byte chunks in a row."""
        return (self.span_bytes // 16).bit_length() - 1

    @property
    def xor_mask(self) -> int:
        """Mask of the row bits, as shifted down onto the chunk bits (``(o >> 3) & mask``)."""
        return ((1 << self.bits) - 1) << 4

    @property
    def align_bytes(self) -> int:
        """Where the repeat pattern starts: 8 rows of the span."""
        return 8 * self.span_bytes

    @property
    def tma(self) -> str:
        """``TensorMapArg.swizzle`` spelling."""
        return f"{self.span_bytes}B"

    @property
    def function(self) -> str:
        """Name of the device function that applies it to a byte offset."""
        return f"swizzle_{self.span_bytes}b"

    def apply(self, offset: int) -> int:
        """The swizzled byte offset (from an ``align_bytes`` boundary), as the device does."""
        return offset ^ ((offset >> 3) & self.xor_mask)

    def snippet(self) -> Snippet:
        return Snippet(
            self.function,
            f"// {self.span_bytes}-byte swizzle (Swizzle<{self.bits},4,3>): XOR the 16-byte chunk\n"
            "// index with the row within 8; `offset` counts from a "
            f"{self.align_bytes}-byte boundary.\n"
            f"__device__ __forceinline__ u32 {self.function}(u32 offset) {{\n"
            f"  return offset ^ ((offset >> 3) & 0x{self.xor_mask:x}u);\n"
            "}\n",
            requires=("types",),
            section='9.7.15.5.1.2 "Shared Memory Matrix Layout" (swizzling modes)',
        )


SWIZZLES = {n: Swizzle(n) for n in (32, 64, 128)}
#: This family's place in a prelude (:func:`codegen.cuda._snippet.register`).
PRELUDE_RANK = 100

register(*(s.snippet() for s in SWIZZLES.values()), rank=PRELUDE_RANK)


def widest(row_bytes: int) -> Swizzle:
    """The widest swizzle whose span divides a row of ``row_bytes`` (at most 128 B)."""
    for span in (128, 64, 32):
        if row_bytes % span == 0:
            return SWIZZLES[span]
    raise ValueError(f"a {row_bytes}-byte row fits no swizzle span")
