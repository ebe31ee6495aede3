"""Code generation: sPrograms to CUDA C++ sources and their launch contracts."""

from codegen.artifact import KernelArtifact, ScalarArg, TensorArg, TensorMapArg

__all__ = ["KernelArtifact", "ScalarArg", "TensorArg", "TensorMapArg"]
