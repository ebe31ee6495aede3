"""wgmma: asynchronous warpgroup matrix multiply-accumulate (sm_90a).

One ``wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}.{f16,bf16}`` multiplies a 64 x 16
tile of A by a 16 x N tile of B into 64 x N fp32 accumulators spread over the warpgroup's
128 threads (N / 2 registers each); for 8-bit floats (``.e4m3`` / ``.e5m2``) the step is
k32, the same 32 bytes of K, and both operands must be K-major in shared memory (no
transpose operands). A and B are read from shared memory through 64-bit
matrix descriptors. The instruction variants are generated here from (N, dtype, B major-
ness), never written out per N (PTX ISA 9.7.15, "Asynchronous Warpgroup Level Matrix
Multiply-Accumulate Instructions").

Ordering (PTX ISA 9.7.15.6-9.7.15.8): ``wgmma.fence`` before the first wgmma that touches
accumulators written by other instructions; ``commit_group`` closes a group;
``wait_group N`` returns once at most N groups are pending. The compiler does not see the
asynchrony, so accumulators are pinned around waits with an empty asm that reads and
writes each register (``wgmma_fence_operands``), keeping their uses after the wait.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from codegen.cuda._snippet import Snippet, register
from codegen.cuda.convert import PTX_FP8_TYPE, PTX_TYPE
from codegen.cuda.swizzle import Swizzle

WGMMA_M, WGMMA_K = 64, 16
WGMMA_N_STEP, WGMMA_N_MAX = 8, 256
#: Descriptor fields hold byte offsets >> 4 in 14 bits (PTX ISA, "Matrix Descriptor Format").
DESCRIPTOR_FIELD_MAX = (1 << 14) - 1

FENCE = Snippet(
    "wgmma_fence",
    "// Order prior register and shared-memory accesses before the next wgmma.\n"
    "__device__ __forceinline__ void wgmma_fence() {\n"
    '  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");\n'
    "}\n",
    section='9.7.15.6 "wgmma.fence"',
)

COMMIT = Snippet(
    "wgmma_commit",
    "// Close the group of wgmma operations issued since the last commit.\n"
    "__device__ __forceinline__ void wgmma_commit() {\n"
    '  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");\n'
    "}\n",
    section='9.7.15.7 "wgmma.commit_group"',
)

WAIT = Snippet(
    "wgmma_wait",
    "// Wait until at most PENDING wgmma groups of this warpgroup are still running.\n"
    "template <int PENDING> __device__ __forceinline__ void wgmma_wait() {\n"
    '  asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(PENDING) : "memory");\n'
    "}\n",
    section='9.7.15.8 "wgmma.wait_group"',
)

FENCE_OPERANDS = Snippet(
    "wgmma_fence_operands",
    "// Pin accumulator registers: their uses stay on this side of the asm (no code motion\n"
    "// across wgmma issue and wait, which the compiler cannot see).\n"
    "template <int COUNT>\n"
    "__device__ __forceinline__ void wgmma_fence_operands(float (&d)[COUNT]) {\n"
    "#pragma unroll\n"
    "  for (int i = 0; i < COUNT; ++i) asm volatile(\"\" : \"+f\"(d[i]) :: \"memory\");\n"
    "}\n"
    "// Register A operands (16-bit pairs): pinned after the wait that completes their wgmma,\n"
    "// they stay live (and are not reused) while it reads them.\n"
    "template <int COUNT>\n"
    "__device__ __forceinline__ void wgmma_fence_operands(u32 (&a)[COUNT]) {\n"
    "#pragma unroll\n"
    "  for (int i = 0; i < COUNT; ++i) asm volatile(\"\" : \"+r\"(a[i]) :: \"memory\");\n"
    "}\n",
)

DESCRIPTOR = Snippet(
    "wgmma_descriptor",
    "// Matrix descriptor: the constant layout bits (LBO, SBO, swizzle mode) plus the\n"
    "// encoded start address ((addr & 0x3FFFF) >> 4, bits 0-13).\n"
    "__device__ __forceinline__ u64 wgmma_descriptor(u32 addr, u64 layout) {\n"
    "  return layout | (u64)((addr & 0x3FFFFu) >> 4);\n"
    "}\n",
    requires=("types",),
    section='9.7.15.5.1.2.2 "Matrix Descriptor Format"',
)

#: This family's place in a prelude (:func:`codegen.cuda._snippet.register`).
PRELUDE_RANK = 120

register(FENCE, COMMIT, WAIT, FENCE_OPERANDS, DESCRIPTOR, rank=PRELUDE_RANK)


#: A descriptor's swizzle mode (bits 62-63) by the swizzle's span in bytes (PTX ISA,
#: "Matrix Descriptor Format").
SWIZZLE_MODES = {128: 1, 64: 2, 32: 3}


@dataclass(frozen=True)
class SmemMatrix:
    """How a wgmma operand tile lies in shared memory, as its descriptor encodes it.

    Args:
        major: ``k`` when K is the contiguous dimension (A, and B stored N x K), ``mn``
            when M / N is (B stored K x N; wgmma transposes it, fp16 / bf16 only).
        swizzle: the swizzle TMA wrote the tile with.
        lbo_bytes: leading dimension byte offset. K-major swizzled: unused (PTX assumes
            1, i.e. 16 B). MN-major swizzled: from one swizzle-atom column of M/N to the
            next.
        sbo_bytes: stride dimension byte offset: between 8-row groups (K-major: 8 rows
            of M/N; MN-major: 8 rows of K).
    """

    major: Literal["k", "mn"]
    swizzle: Swizzle
    lbo_bytes: int
    sbo_bytes: int

    def __post_init__(self) -> None:
        for name in ("lbo_bytes", "sbo_bytes"):
            value = getattr(self, name)
            if value % 16 or not 0 < value >> 4 <= DESCRIPTOR_FIELD_MAX:
                raise ValueError(f"{name}={value} does not fit a wgmma descriptor field")

    @property
    def layout_bits(self) -> int:
        """The descriptor without its start address."""
        return (
            (self.lbo_bytes >> 4) << 16
            | (self.sbo_bytes >> 4) << 32
            | SWIZZLE_MODES[self.swizzle.span_bytes] << 62
        )

    def describe(self) -> str:
        return (
            f"{self.major.upper()}-major, {self.swizzle.span_bytes}B swizzle, "
            f"LBO {self.lbo_bytes} B, SBO {self.sbo_bytes} B"
        )


def k_step(dtype: str) -> int:
    """Elements of K one wgmma reduces over: 16 for 16-bit inputs, 32 for 8-bit floats."""
    return 32 if dtype in PTX_FP8_TYPE else WGMMA_K


def _ptx_type(dtype: str) -> str:
    if dtype in PTX_TYPE:
        return PTX_TYPE[dtype]
    if dtype in PTX_FP8_TYPE:
        return PTX_FP8_TYPE[dtype]
    raise ValueError(f"wgmma: unsupported dtype {dtype}")


def mma_name(n: int, dtype: str, b_major: str, a_major: str = "k") -> str:
    a = "_amn" if a_major == "mn" else ""
    return f"wgmma_m64n{n}k{k_step(dtype)}_{_ptx_type(dtype)}{a}_b{b_major}"


def mma_rs_name(n: int, dtype: str, b_major: str) -> str:
    return f"wgmma_m64n{n}k{k_step(dtype)}_{_ptx_type(dtype)}_rs_b{b_major}"


def mma(n: int, dtype: str, b_major: Literal["k", "mn"],
        a_major: Literal["k", "mn"] = "k") -> Snippet:
    """The wrapper of ``wgmma.mma_async m64n{n}k16`` with fp32 accumulation.

    ``d`` holds the n / 2 accumulators of this thread; ``scale_d == 0`` ignores their old
    values (the first MMA of a tile), otherwise they accumulate. An MN-major A (a weight
    stored K x N read as a swapped GEMM's M side) sets the instruction's transpose bit
    for A, as an MN-major B sets B's (16-bit inputs only).
    """
    return _mma_snippet(n, dtype, b_major, a_in_registers=False, a_major=a_major)


def mma_rs(n: int, dtype: str, b_major: Literal["k", "mn"]) -> Snippet:
    """``wgmma.mma_async m64n{n}k16`` with A from registers (fp32 accumulation).

    A is this thread's four 32-bit registers of the 64 x 16 A tile, each two 16-bit
    elements: rows ``r`` and ``r + 8`` (``r = 16 warp + lane / 4``) at columns
    ``2 (lane % 4)`` and ``+ 8`` (PTX ISA 9.7.15.5.1.1, "Register Fragments"). That is the
    layout of an m64nN fp32 accumulator's 16 columns converted to pairs, so a product
    ``P = softmax(S)`` feeds the next wgmma without a shared-memory round trip. For 8-bit
    floats (k32, B K-major) each register holds four elements: rows ``r`` and ``r + 8``
    at columns ``4 (lane % 4)`` .. ``+ 3`` and ``+ 16``.
    """
    return _mma_snippet(n, dtype, b_major, a_in_registers=True)


def _mma_snippet(n: int, dtype: str, b_major: str, *, a_in_registers: bool,
                 a_major: str = "k") -> Snippet:
    """Both forms of the instruction: operands ``%0..%{n/2-1}`` are the accumulators, then
    A (a descriptor, or four registers), B's descriptor and ``scale_d``."""
    if n % WGMMA_N_STEP or not WGMMA_N_STEP <= n <= WGMMA_N_MAX:
        raise ValueError(f"wgmma N={n} is not a multiple of 8 in [8, 256]")
    ptx, k = _ptx_type(dtype), k_step(dtype)
    fp8 = dtype in PTX_FP8_TYPE
    if fp8 and (b_major != "k" or a_major != "k"):
        raise ValueError("wgmma: 8-bit floats are read K-major only")
    if a_in_registers and a_major != "k":
        raise ValueError("wgmma: A from registers has no transpose")
    regs = n // 2
    trans_a = 1 if a_major == "mn" else 0
    trans_b = 1 if b_major == "mn" else 0
    per_line = 16
    asm_regs = "".join(
        '               "'
        + ", ".join(f"%{i}" for i in range(start, min(start + per_line, regs)))
        + (", " if start + per_line < regs else "")
        + '"\n'
        for start in range(0, regs, per_line)
    )
    out_lines = [
        ", ".join(f'"+f"(d[{i}])' for i in range(start, min(start + 8, regs)))
        for start in range(0, regs, 8)
    ]
    if a_in_registers:
        name = mma_rs_name(n, dtype, b_major)
        head = (f"// D(64x{n}, fp32) += A(64x{k}, registers) * B({k}x{n}, smem, "
                f"{b_major.upper()}-major), {ptx} inputs.\n")
        params = "u32 a0, u32 a1, u32 a2, u32 a3, u64 desc_b, int scale_d"
        scale = regs + 5
        a_b = "{" + ", ".join(f"%{regs + i}" for i in range(4)) + f"}}, %{regs + 4}"
        # No transpose of A from registers; none of an 8-bit B either.
        modes = "p, 1, 1" if fp8 else f"p, 1, 1, {trans_b}"
        inputs = '"r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc_b), "r"(scale_d)'
    else:
        name = mma_name(n, dtype, b_major, a_major)
        head = (f"// D(64x{n}, fp32) += A(64x{k}, smem, {a_major.upper()}-major) * B({k}x{n}, "
                f"smem, {b_major.upper()}-major), {ptx} inputs.\n")
        params = "u64 desc_a, u64 desc_b, int scale_d"
        scale = regs + 2
        a_b = f"%{regs}, %{regs + 1}"
        modes = "p, 1, 1" if fp8 else f"p, 1, 1, {trans_a}, {trans_b}"
        inputs = '"l"(desc_a), "l"(desc_b), "r"(scale_d)'
    code = (
        head
        + f"__device__ __forceinline__ void {name}(\n"
        f"    float (&d)[{regs}], {params}) {{\n"
        '  asm volatile("{\\n"\n'
        '               ".reg .pred p;\\n"\n'
        f'               "setp.ne.b32 p, %{scale}, 0;\\n"\n'
        f'               "wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{ptx}.{ptx} {{"\n'
        + asm_regs
        + f'               "}}, {a_b}, {modes};\\n"\n'
        '               "}\\n"\n'
        "               : "
        + ",\n                 ".join(out_lines)
        + f"\n               : {inputs});\n"
        "}\n"
    )
    return Snippet(name, code, requires=("types",), section='9.7.15.5.2 "wgmma.mma_async"')
