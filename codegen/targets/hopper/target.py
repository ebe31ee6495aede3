"""Hopper (H100, H200): TMA, wgmma and setmaxnreg, which the ``a`` suffix of sm_90a
enables; code built so runs on compute capability 9.0 only.

Its matrix products are wgmma groups: the accumulators pinned, a ``wgmma.fence``, per k
step one ``m64nNk16`` per 64-row block (A from shared memory through a descriptor, or
from registers), then ``commit_group``; ``wgmma.wait_group`` waits for them. A stage is
armed with ``mbarrier.arrive.expect_tx`` (TMA completes it as its bytes land), and
``setmaxnreg`` moves registers from the producer warpgroup to the consumers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from codegen.targets.fragment import WarpgroupFragments
from codegen.targets.hopper import wgmma
from codegen.targets.mma import Mma
from codegen.targets.target import Target
from scheduler_search.sprogram import BarrierKind

if TYPE_CHECKING:
    from collections.abc import Mapping

    from codegen.cuda import Snippet
    from codegen.pipeline.code import Code
    from codegen.pipeline.operand import OperandTile
    from scheduler_search.hardware import Device


@dataclass(frozen=True)
class HopperTarget(WarpgroupFragments, Target):
    """sm_90a's instructions for what the pipeline and the operators ask for."""

    @property
    def mma_rows(self) -> int:
        return wgmma.WGMMA_M

    @property
    def tensor_map_encoding(self) -> Literal["tma", "copy"]:
        """TMA descriptors, encoded by the driver."""
        return "tma"

    @property
    def operand_regs(self) -> int:
        """None: wgmma reads its operands from shared memory through descriptors (in the
        consumers' overhead)."""
        return 0

    def runs_on(self, device: Device) -> bool:
        return device.capabilities.tma and device.capabilities.wgmma

    @property
    def mma_name(self) -> str:
        return "wgmma"

    @property
    def mma_n_max(self) -> int:
        return wgmma.WGMMA_N_MAX

    @property
    def mma_n_step(self) -> int:
        return wgmma.WGMMA_N_STEP

    @property
    def fp8_attention(self) -> bool:
        return True

    def k_step(self, dtype: str) -> int:
        return wgmma.k_step(dtype)

    def write_fence_operands(self, code: Code, registers: str) -> None:
        code(code.call("wgmma_fence_operands", registers) + ";")

    def barrier_name(self, kind: BarrierKind) -> str:
        """A ring stage is an mbarrier, a turn a named barrier, an MMA's completion
        ``wgmma.wait_group``."""
        return {BarrierKind.STAGE: "mbarrier", BarrierKind.TURN: "named",
                BarrierKind.MMA_WAIT: "wgmma_wait"}[kind]

    def write_mma(self, code: Code, mma: Mma) -> None:
        """One wgmma group computing ``mma``."""
        c = code
        instruction = (wgmma.mma_rs(mma.n, mma.dtype, mma.b_major) if mma.a_in_registers
                       else wgmma.mma(mma.n, mma.dtype, mma.b_major, mma.a_major))
        c("#pragma unroll")
        mma.pin()
        c(c.call("wgmma_fence") + ";")
        for line in mma.bases:
            c(line)
        for part in mma.parts:
            c("#pragma unroll")
            with c.block(f"for (int kk = 0; kk < {mma.k_steps}; ++kk)"):
                if mma.tail_break:
                    c(f"if ({mma.tail_break}) break;  // past K")
                c("const u64 desc_b = "
                  + c.call("wgmma_descriptor", part.b_address, mma.b_layout) + ";")
                c("#pragma unroll")
                with c.block(f"for (int mi = 0; mi < {mma.row_blocks}; ++mi)"):
                    if part.a_registers is not None:
                        a = [part.a_registers.format(i=i) for i in range(4)]
                    else:
                        a = [c.call("wgmma_descriptor", part.a_address, mma.a_layout)]
                    c(c.call(instruction, part.accumulator, *a, "desc_b", mma.accumulate)
                      + ";")
        c(c.call("wgmma_commit") + ";")

    def write_mma_wait(self, code: Code, pending: int | str) -> None:
        """``wgmma.wait_group``: at most ``pending`` groups of this warpgroup left."""
        code(code.call(f"wgmma_wait<{pending}>") + ";")

    def operand_descriptor(self, tile: OperandTile) -> wgmma.SmemMatrix:
        span = tile.swizzle.span_bytes
        if tile.major == "k":
            # K-major: 8-row groups are 8 swizzled rows apart; LBO unused (PTX: assumed 1).
            return wgmma.SmemMatrix("k", tile.swizzle, lbo_bytes=16, sbo_bytes=8 * span)
        # MN-major: the next 64 columns of N are the next box; 8 rows of K are 8 spans.
        return wgmma.SmemMatrix("mn", tile.swizzle, lbo_bytes=tile.box_bytes,
                                sbo_bytes=8 * span)

    def write_arm_stage(self, code: Code, full: str, bytes_expr: str) -> None:
        """``mbarrier.arrive.expect_tx``: TMA completes the barrier as the bytes land."""
        code(code.call("mbarrier_arrive_expect_tx", full, bytes_expr) + ";")

    @property
    def loader_threads(self) -> int:
        """One thread issues a stage's TMA copies."""
        return 1

    def write_stage_issued(self, code: Code, full: str) -> None:
        """Nothing: the arming's expected bytes complete the stage as TMA lands them."""

    @property
    def snippet_variants(self) -> Mapping[str, Snippet]:
        """None: the registered primitives are Hopper's."""
        return {}

    def write_register_budget(self, code: Code,
                              role: Literal["producer", "consumer"]) -> None:
        """``setmaxnreg``: the producer gives registers up, the consumers take them."""
        budget = ("setmaxnreg_dec<PRODUCER_REGS>" if role == "producer"
                  else "setmaxnreg_inc<CONSUMER_REGS>")
        code(code.call(budget) + ";")

    def write_kernel_constants(self, code: Code, spare_regs: int) -> None:
        """None: wgmma reads its operands through descriptors."""


HOPPER = HopperTarget(arch="sm_90a")
