"""Per-operator hooks on the pipeline skeleton (one module each)."""

from codegen.kernels.attention import ATTENTION_HOOKS_VERSION, AttentionHooks
from codegen.kernels.gemm import GEMM_HOOKS_VERSION, GemmHooks

__all__ = ["ATTENTION_HOOKS_VERSION", "GEMM_HOOKS_VERSION", "AttentionHooks", "GemmHooks"]
