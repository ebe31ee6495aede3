"""What the dashboard says about each operator: its name, how to read its timeline, and
what its baseline is called. One row per operator, so that no operator's page carries
another's caption (a GEMM sentence under a Mamba2 timeline misleads)."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler_search.ops import OPERATORS

#: Peers' names as people know them (the stored names are the workers' identifiers).
PEER_NAMES = {
    "cublas": "cuBLAS",
    "sdpa_cudnn": "cuDNN SDPA",
    "sdpa_flash": "FlashAttention-2",
    "sdpa_cudnn_backward": "cuDNN SDPA backward",
    "sdpa_flash_backward": "FlashAttention-2 backward",
    "cutlass_sm80": "CUTLASS sm_80 GEMM",
    "mamba_ssm_chunk_scan": "mamba_ssm",
    "mamba_ssm_chunk_state": "mamba_ssm",
}


@dataclass(frozen=True)
class OperatorText:
    """The words of one operator's pages.

    Attributes:
        title: the operator as a heading names it.
        timeline: how to read the per-sEU timeline of its schedules (its sTasks by name).
        baseline: the vendor peer a GPU run compares with, as people call it, or None.
    """

    title: str
    timeline: str
    baseline: str | None


#: Operator -> (title, how to read its timeline) (:func:`register_operator_text` adds one).
OPERATOR_WORDS: dict[str, tuple[str, str]] = {
    "gemm": ("GEMM", "Each k-step copies an A and a B tile on TMA (load_a, load_b) while the "
             "tensor cores' wgmma (mma) works on the previous stage: that overlap is the "
             "pipeline. The store writes the C tile after the k-loop."),
    "attention": ("Attention", "load_q copies the Q tile once, before the loop. Each step "
                  "copies a K and a V tile (load_k, load_v) while the tensor cores compute "
                  "QKᵀ (mma_qk) and PV (mma_pv), the online softmax between them on the CUDA "
                  "cores and SFU. normalize and store write O after the loop."),
    "attention_backward": ("Attention backward", "load_k and load_v copy a key tile's K "
                           "and V once. Each step copies a query tile's Q with its lse row "
                           "and dO with O while the tensor cores recompute the scores "
                           "(mma_s) and take dP (mma_dp), dV (mma_dv), dK (mma_dk) and dQ's "
                           "part (mma_dq), the softmax, D and dS on the CUDA cores and SFU; dQ's "
                           "part is added to global memory every step, dK and dV stored after "
                           "the loop."),
    "mamba2_chunk_scan": ("Mamba2 chunk scan", "Before the loop the C tile, the entering "
                          "states and dA are loaded and the inter-chunk term C·states "
                          "(mma_state, decay_out) computed. Each step loads a cb and an x "
                          "tile with dt and dA, masks and decays cb (decay, scale_cb) and "
                          "accumulates the intra-chunk term (mma_x). The D skip term and the "
                          "store follow the loop."),
    "mamba2_chunk_state": ("Mamba2 chunk state", "Each step loads x, B, dt and dA for a slice "
                           "of the chunk, weights x by the decay (decay, scale_x) and "
                           "accumulates x·B on the tensor cores (mma). The store writes the "
                           "chunk's final state after the loop."),
}
#: The timeline's words for an operator without its own.
_NEUTRAL_TIMELINE = "Each bar is one sTask instance on the sEU that runs it."


def register_operator_text(op: str, title: str, timeline: str) -> None:
    """Give operator ``op``'s pages their heading and timeline caption (a new operator
    registers its own; one without them gets neutral words)."""
    OPERATOR_WORDS[op] = (title, timeline)


def peer_name(name: str | None) -> str | None:
    """A peer's name as people know it (``cublas`` reads ``cuBLAS``)."""
    return PEER_NAMES.get(name, name) if name else None


def operator_text(op: str) -> OperatorText:
    """The words for ``op``'s pages; an operator without its own row gets neutral ones."""
    spec = OPERATORS.get(op)
    title, timeline = OPERATOR_WORDS.get(op, (op, _NEUTRAL_TIMELINE))
    return OperatorText(title=title, timeline=timeline,
                        baseline=peer_name(spec.baseline if spec is not None else None))
