"""Per-operator kernel emitters (one module each)."""

from codegen.kernels.gemm import GemmPlan, Unsupported, gemm_unsupported, render_gemm

__all__ = ["GemmPlan", "Unsupported", "gemm_unsupported", "render_gemm"]
