"""Ampere and Ada (A100, A10, A40, L40S, RTX 4090; sm_80, sm_86, sm_89): ``cp.async`` copies,
``mma.sync`` through ``ldmatrix``, mbarrier rings; no TMA, no asynchronous warpgroup MMA, no
setmaxnreg, no clusters.

The same sPrograms as Hopper's, written with these instructions: a ring stage is still an
mbarrier pair, but its full barrier counts one arrival per loading thread, each made by
``cp.async.mbarrier.arrive.noinc`` once that thread's copies have landed
(:mod:`codegen.targets.ampere.copies`); a product is the warpgroup's four warps of
``mma.sync`` (:mod:`codegen.targets.ampere.mma_sync`), complete when issued, so there is
nothing to wait for or to fence; the registers are the launch bound's, shared evenly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from codegen.cuda.convert import PTX_FP8_TYPE, PTX_TYPE
from codegen.targets.ampere import copies, mma_sync
from codegen.targets.fragment import WarpgroupFragments
from codegen.targets.mma import Mma, MmaPart
from codegen.targets.target import Target
from scheduler_search.sprogram import BarrierKind

if TYPE_CHECKING:
    from collections.abc import Mapping

    from codegen.artifact import TensorMapArg
    from codegen.cuda import Snippet
    from codegen.pipeline.code import Code
    from codegen.pipeline.operand import OperandTile
    from scheduler_search.hardware import Device

#: Threads that copy a stage: the loading warpgroup, every thread a share of the chunks.
LOADER_THREADS = 128
#: A consumer thread's registers for the operands of its mma.sync (A's and B's fragments and
#: their addresses); nvcc for sm_80 (2026-12-05): a chunk scan asking 160 of 168 spilled 48 B.
OPERAND_REGS = 16
#: Registers a consumer thread must have to spare (beyond the estimate of what its code
#: needs) for the main loop's two register-hungry shortcuts (nvcc 13.0, an sm_80 GEMM trip
#: of 256 mma.sync with ~70 to spare: ~170 fewer instructions for the first, 128 fewer for
#: the second): each lane's ldmatrix offsets kept in registers (``swizzled_row``), and a
#: first k step written twice, writing its accumulators where it does not add to them.
#: With fewer, the addresses are swizzled where they are used and the accumulators zeroed
#: before the step: the kept offsets spilled sm_80 attention kernels of 384 threads (7-31
#: to spare; 48-152 B) and a 128 x 192 GEMM tile of 256 threads (39; 16 B), the twin step
#: a 384-thread attention kernel (32; 12 B), none of which spilled without them.
SPARE_REGS_MIN = 64
#: The kernel constant that says whether its consumer threads have them to spare.
SPARE_REGISTERS = "SPARE_REGISTERS"


@dataclass(frozen=True)
class AmpereTarget(WarpgroupFragments, Target):
    """sm_80-class instructions for what the pipeline and the operators ask for."""

    @property
    def mma_rows(self) -> int:
        return mma_sync.BLOCK_ROWS

    @property
    def mma_name(self) -> str:
        return "mma.sync"

    @property
    def mma_n_max(self) -> int:
        return mma_sync.N_MAX

    @property
    def mma_n_step(self) -> int:
        return mma_sync.N_STEP

    @property
    def tensor_map_encoding(self) -> Literal["tma", "copy"]:
        """pipetune's copy maps, which the loading threads read."""
        return "copy"

    def tensor_map_type(self, arg: TensorMapArg) -> str:
        """The copy map with its box's geometry as template constants."""
        return copies.map_type(arg)

    @property
    def operand_regs(self) -> int:
        """A's four fragment registers, B's four, and their lane addresses."""
        return OPERAND_REGS

    def runs_on(self, device: Device) -> bool:
        caps = device.capabilities
        return caps.cp_async and caps.mma_sync and device.arch == self.arch

    def k_step(self, dtype: str) -> int:
        if dtype not in PTX_TYPE and not (dtype in PTX_FP8_TYPE and self.fp8_mma):
            raise ValueError(f"{self.arch}: {dtype} products are not generated")
        return mma_sync.k_step(dtype)

    @property
    def fp8_mma(self) -> bool:
        """Whether ``mma.sync`` multiplies 8-bit floats here (``m16n8k32``: sm_89)."""
        return self.compute_capability >= (8, 9)

    @property
    def fp8_attention(self) -> bool:
        """No: FP8 attention's v transpose and P permutation are written for Hopper."""
        return False

    def write_fence_operands(self, code: Code, registers: str) -> None:
        """Nothing: ``mma.sync`` reads and writes its registers in program order."""

    def barrier_name(self, kind: BarrierKind) -> str:
        """A ring stage is an mbarrier (arrived on by cp.async), a turn a named barrier;
        an MMA completes as it is issued."""
        return {BarrierKind.STAGE: "mbarrier", BarrierKind.TURN: "named",
                BarrierKind.MMA_WAIT: "in order"}[kind]

    def write_mma(self, code: Code, mma: Mma) -> None:
        """Per k step: every row block's A fragment, then per 16 columns of B one fragment
        load for all the row blocks' ``mma.sync`` (B read once, not once a row block).
        A step that does not accumulate writes its accumulators (``mma.sync`` with C = 0)
        behind a branch where the kernel has registers to spare (zeroing them first cost a
        select per accumulator every trip: 128 FSEL beside 256 HMMA a trip of a 128 x 128
        GEMM tile, nvcc 13.0); elsewhere they are zeroed before it."""
        c = code
        mma_sync.check_shape(mma.n, mma.dtype, mma.a_major, mma.b_major)
        adding = mma_sync.instruction(mma.dtype)
        for line in mma.bases:
            c(line)
        for part in mma.parts:
            c("#pragma unroll")
            with c.block(f"for (int kk = 0; kk < {mma.k_steps}; ++kk)"):
                if mma.tail_break:
                    c(f"if ({mma.tail_break}) break;  // past K")
                a = self._a_fragments(c, mma, part)
                if mma.accumulate == "true":
                    self._columns(c, mma, part, adding, a)
                else:
                    self._first_step(c, mma, part, a)

    def _first_step(self, code: Code, mma: Mma, part: MmaPart, a: str) -> None:
        """A step that may not accumulate: with registers to spare, its products written
        twice, adding or writing the accumulators (mma.sync with C = 0); else the
        accumulators zeroed where it does not accumulate, then the adding products."""
        adding = mma_sync.instruction(mma.dtype)
        with code.block(f"if constexpr ({SPARE_REGISTERS})"):
            with code.block(f"if ({mma.accumulate})"):
                self._columns(code, mma, part, adding, a)
            with code.block("else"):
                self._columns(code, mma, part, mma_sync.instruction(mma.dtype, fresh=True), a)
        with code.block("else"):
            with code.block(f"if (!({mma.accumulate}))"):
                code("#pragma unroll")
                with code.block(f"for (int mi = 0; mi < {mma.row_blocks}; ++mi)"):
                    code("#pragma unroll")
                    code(f"for (int i = 0; i < {mma.n // 2}; ++i) "
                         f"({part.accumulator})[i] = 0.0f;")
            self._columns(code, mma, part, adding, a)

    def _a_fragments(self, code: Code, mma: Mma, part: MmaPart) -> str:
        """A's registers of row block ``mi`` as a template of ``{i}``: loaded here from
        shared memory, or the operator's registers."""
        if part.a_registers is not None:
            return part.a_registers
        code(f"u32 a_frag[{mma.row_blocks}][4];")
        code("#pragma unroll")
        load = code.call(mma_sync.a_fragment(mma.a_major), "a_frag[mi]", part.a_address,
                         mma.a_layout, template=SPARE_REGISTERS)
        code(f"for (int mi = 0; mi < {mma.row_blocks}; ++mi) {load};")
        return "a_frag[mi][{i}]"

    def _columns(self, code: Code, mma: Mma, part: MmaPart, instruction: Snippet,
                 a: str) -> None:
        """The products, 16 columns (and a last 8) at a time, B loaded once for them."""
        c = code
        regs = [a.format(i=i) for i in range(4)]
        widths = [(n0, 16) for n0 in range(0, mma.n - mma.n % 16, 16)]
        widths += [(mma.n - 8, 8)] if mma.n % 16 else []
        for n0, width in widths:
            with c.block(""):
                c(f"u32 b[{width // 4}];")
                c(c.call(mma_sync.b_fragments(mma.b_major, width), "b", part.b_address, n0,
                         mma.b_layout, template=SPARE_REGISTERS) + ";")
                c("#pragma unroll")
                with c.block(f"for (int mi = 0; mi < {mma.row_blocks}; ++mi)"):
                    for j in range(width // 8):
                        acc = f"&({part.accumulator})[{(n0 // 8 + j) * 4}]"
                        c(c.call(instruction, acc, *regs, f"b[{2 * j}]", f"b[{2 * j + 1}]")
                          + ";")

    def write_mma_wait(self, code: Code, pending: int | str) -> None:
        """Nothing: every product has completed when the next instruction runs."""

    def operand_descriptor(self, tile: OperandTile) -> mma_sync.SmemTile:
        return mma_sync.SmemTile(tile.major, tile.swizzle, tile.box_bytes)

    @property
    def loader_threads(self) -> int:
        return LOADER_THREADS

    def write_arm_stage(self, code: Code, full: str, bytes_expr: str) -> None:
        """Nothing before the copies: each loading thread arrives after its own."""

    def write_stage_issued(self, code: Code, full: str) -> None:
        """This thread's arrival on ``full``, made when its copies have landed."""
        code(code.call("cp_async_arrive_noinc", full) + ";")

    @property
    def snippet_variants(self) -> Mapping[str, Snippet]:
        return copies.variants(LOADER_THREADS)

    def write_register_budget(self, code: Code,
                              role: Literal["producer", "consumer"]) -> None:
        """Nothing: without setmaxnreg every warp keeps the launch bound's share."""

    def write_kernel_constants(self, code: Code, spare_regs: int) -> None:
        """Whether the main loop may spend registers on its shortcuts (:data:`SPARE_REGS_MIN`)."""
        spare = "true" if spare_regs >= SPARE_REGS_MIN else "false"
        code(f"constexpr bool {SPARE_REGISTERS} = {spare};  // {spare_regs} registers a "
             "consumer thread to spare: lanes' ldmatrix offsets kept, first k step twice")


#: The three Ampere-class architectures, one target each (their compile options differ).
AMPERE = AmpereTarget(arch="sm_80")
AMPERE_SM86 = AmpereTarget(arch="sm_86")
ADA = AmpereTarget(arch="sm_89")
