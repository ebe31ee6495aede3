"""A code-generation target: one architecture's compile options."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """An architecture kernels are generated for.

    Args:
        arch: the architecture NVRTC and nvcc compile for (``sm_90a``: Hopper with its
            architecture-specific features, wgmma and setmaxnreg).
        language: the C++ standard the generated text is written in.
    """

    arch: str
    language: str = "c++17"

    @property
    def compile_options(self) -> tuple[str, ...]:
        """NVRTC's options (a kernel artifact carries them)."""
        return (f"-std={self.language}", f"-arch={self.arch}")

    @property
    def nvcc_arch(self) -> tuple[str, ...]:
        """nvcc's code generation option: a cubin of this architecture from its PTX."""
        number = self.arch.removeprefix("sm_")
        return (f"-gencode=arch=compute_{number},code={self.arch}",)

    def nvcc_build_line(self, output: str, *sources: str) -> str:
        """The nvcc command that builds ``sources`` into ``output`` for this target."""
        return " ".join(("nvcc", *self.nvcc_arch, f"-std={self.language}", "-o", output,
                         *sources, "-lcuda"))
