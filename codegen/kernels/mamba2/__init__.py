"""Mamba2's SSD chunk kernels as hooks on the pipeline skeleton."""

from codegen.kernels.mamba2.chunk_scan import CHUNK_SCAN_HOOKS_VERSION, ChunkScanHooks
from codegen.kernels.mamba2.chunk_state import CHUNK_STATE_HOOKS_VERSION, ChunkStateHooks

__all__ = [
    "CHUNK_SCAN_HOOKS_VERSION",
    "CHUNK_STATE_HOOKS_VERSION",
    "ChunkScanHooks",
    "ChunkStateHooks",
]
