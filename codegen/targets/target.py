"""A code-generation target: one architecture's compile options and the instructions of
what the sProgram asks for on it (matrix products, their waits, a stage's arming, register
budgets, the accumulator fragment's layout)."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from codegen.artifact import TensorMapArg
    from codegen.cuda import Snippet
    from codegen.pipeline.code import Code
    from codegen.pipeline.operand import OperandTile
    from codegen.targets.mma import Mma
    from scheduler_search.hardware import Device
    from scheduler_search.sprogram import BarrierKind


class OperandDescriptor(Protocol):
    """An operand tile's layout as the MMA reads it: what the kernel's constants hold."""

    @property
    def layout_bits(self) -> int:
        """The descriptor's bits without the tile's address."""

    def describe(self) -> str:
        """The layout in words, for the kernel's comments."""


@dataclass(frozen=True)
class Target(abc.ABC):
    """An architecture kernels are generated for.

    Args:
        arch: the architecture NVRTC and nvcc compile for (Hopper's, in
            :mod:`codegen.targets.hopper`, is the variant with the architecture-specific
            instructions its MMA and register budgets use).
        language: the C++ standard the generated text is written in.
    """

    arch: str
    language: str = "c++17"

    @property
    def compile_options(self) -> tuple[str, ...]:
        """NVRTC's options (a kernel artifact carries them)."""
        return (f"-std={self.language}", f"-arch={self.arch}")

    @property
    def compute_capability(self) -> tuple[int, int]:
        """The compute capability this target's architecture is (``sm_80`` -> (8, 0))."""
        digits = self.arch.removeprefix("sm_").rstrip("a")
        return int(digits[:-1]), int(digits[-1])

    def compile_options_for(self, device: Device) -> tuple[str, ...]:
        """NVRTC's options for this target's code on ``device``: its own architecture's,
        or, on a newer GPU running the code (sm_80 code on an H200), that GPU's, whose
        ptxas then schedules the same instructions."""
        if tuple(device.compute_capability) == self.compute_capability:
            return self.compile_options
        major, minor = device.compute_capability
        return (f"-std={self.language}", f"-arch=sm_{major}{minor}")

    @property
    def nvcc_arch(self) -> tuple[str, ...]:
        """nvcc's code generation option: a cubin of this architecture from its PTX."""
        number = self.arch.removeprefix("sm_")
        return (f"-gencode=arch=compute_{number},code={self.arch}",)

    def nvcc_build_line(self, output: str, *sources: str) -> str:
        """The nvcc command that builds ``sources`` into ``output`` for this target."""
        return " ".join(("nvcc", *self.nvcc_arch, f"-std={self.language}", "-o", output,
                         *sources, "-lcuda"))

    @property
    @abc.abstractmethod
    def mma_rows(self) -> int:
        """Rows of one MMA block: the consumers' accumulators are cut in blocks of them."""

    @property
    @abc.abstractmethod
    def mma_name(self) -> str:
        """The MMA instruction's name, as the generated text's comments call it."""

    @property
    @abc.abstractmethod
    def mma_n_max(self) -> int:
        """The widest N one MMA instruction computes."""

    @property
    @abc.abstractmethod
    def mma_n_step(self) -> int:
        """The step of the N widths an MMA instruction takes."""

    @property
    @abc.abstractmethod
    def tensor_map_encoding(self) -> Literal["tma", "copy"]:
        """How the host writes a kernel's ``TensorMap`` arguments: TMA descriptors
        (``cuTensorMapEncodeTiled``), or pipetune's copy maps
        (:mod:`codegen.targets.ampere.copies`)."""

    def tensor_map_type(self, arg: TensorMapArg) -> str:
        """The C++ type of ``arg`` in the kernel's parameters (the same 128 bytes
        whatever it is called): ``TensorMap`` unless the target's copies read part of the
        map as constants."""
        return "TensorMap"

    @property
    @abc.abstractmethod
    def operand_regs(self) -> int:
        """Registers a consumer thread holds for its products' operands besides the
        accumulators (fragments loaded from shared memory, their addresses)."""

    @abc.abstractmethod
    def runs_on(self, device: Device) -> bool:
        """Whether ``device`` has what this target's code uses."""

    @property
    @abc.abstractmethod
    def fp8_attention(self) -> bool:
        """Whether FP8 attention (8-bit q, k, v) is written for this target."""

    @abc.abstractmethod
    def k_step(self, dtype: str) -> int:
        """Elements of K one MMA instruction reduces over for inputs of ``dtype``."""

    @abc.abstractmethod
    def write_fence_operands(self, code: Code, registers: str) -> None:
        """Keep the compiler from moving reads or writes of ``registers`` (an accumulator
        or a register operand) across the asynchronous products that use them."""

    @abc.abstractmethod
    def barrier_name(self, kind: BarrierKind) -> str:
        """How this target keeps a barrier of ``kind`` (the kernel's header says it)."""

    @abc.abstractmethod
    def write_mma(self, code: Code, mma: Mma) -> None:
        """The instructions computing the matrix product ``mma``."""

    @abc.abstractmethod
    def write_mma_wait(self, code: Code, pending: int | str) -> None:
        """Wait until at most ``pending`` of this warpgroup's products still run."""

    @abc.abstractmethod
    def operand_descriptor(self, tile: OperandTile) -> OperandDescriptor:
        """How the MMA finds ``tile`` in shared memory (its layout, as the kernel's
        constants hold it)."""

    @property
    @abc.abstractmethod
    def loader_threads(self) -> int:
        """Threads of the loading warpgroup that issue a stage's copies, each arriving once
        on the stage's full barrier (its arrival count)."""

    def loader_guard(self) -> str:
        """The C++ condition that picks the loading threads of the loading warpgroup."""
        if self.loader_threads == 1:
            return "threadIdx.x == 0"
        return f"threadIdx.x < {self.loader_threads}"

    @abc.abstractmethod
    def write_arm_stage(self, code: Code, full: str, bytes_expr: str) -> None:
        """Arm a stage's full barrier with the bytes its copies will land (before them)."""

    @abc.abstractmethod
    def write_stage_issued(self, code: Code, full: str) -> None:
        """After a loading thread has issued a stage's copies: what completes ``full``
        once they land."""

    @property
    @abc.abstractmethod
    def snippet_variants(self) -> Mapping[str, Snippet]:
        """This architecture's own text of primitives the kernels call by their neutral
        name (an mbarrier wait, a tile copy), in place of the registered one."""

    @abc.abstractmethod
    def write_register_budget(self, code: Code,
                              role: Literal["producer", "consumer"]) -> None:
        """Give a warpgroup its role's register budget."""

    @abc.abstractmethod
    def write_kernel_constants(self, code: Code, spare_regs: int) -> None:
        """This target's constants of one kernel, among the kernel's own (``spare_regs``:
        the registers a consumer thread is compiled with beyond the estimate of what its
        code needs)."""

    @abc.abstractmethod
    def accumulator_rows(self, code: Code) -> AbstractContextManager[None]:
        """The loops over the accumulator fragment's rows this thread holds."""

    @abc.abstractmethod
    def each_accumulator_value(self, code: Code, regs: str, element: str, body: list[str],
                               before: list[str] | None = None,
                               after: list[str] | None = None) -> None:
        """``body`` for each accumulator value this thread holds."""


__all__ = ["Target"]
