"""Per-operator hooks on the pipeline skeleton (one module each)."""

from codegen.kernels.gemm import GEMM_HOOKS_VERSION, GemmHooks

__all__ = ["GEMM_HOOKS_VERSION", "GemmHooks"]
