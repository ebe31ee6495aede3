"""The loop orders attention's register fragments and its transposed v allow.

The sProgram orders the loop's sTasks and may issue some a trip ahead (``lead``). S and P
have one buffer, (FP8) the transposed v one per trip parity, so an order is refused where
a trip's writer would overwrite what an earlier trip still reads: the next ``Q Kᵀ`` issued
before the softmax is done with the scores; P packed (in ``rescale``) after ``P V`` of its
trip; v transposed before ``rescale`` of the trip before has waited for the ``P V`` that
read the same copy (two trips back), or after its own ``P V``.
"""

from __future__ import annotations

from codegen.pipeline.pipelined import loop_stream
from codegen.pipeline.structure import PipelineStructure

#: The sTasks that read a trip's scores; ``rescale`` packs them into P.
SCORE_READERS = ("softmax_max", "softmax_exp2", "softmax_sum", "rescale")


def issue_steps(structure: PipelineStructure) -> dict[str, int]:
    """When each loop sTask works on trip 0, in issue steps: an issue at position n with
    lead l works on trip t at step (t - l) * len + n."""
    loop = loop_stream(structure)
    return {i.stask: n - i.lead * len(loop) for n, i in enumerate(loop)}


def order_problem(structure: PipelineStructure) -> str | None:
    """Why the loop's order would overwrite a fragment still read, or None."""
    steps = issue_steps(structure)
    length = len(steps)
    if any(steps["mma_qk"] + length < steps[r] for r in SCORE_READERS if r in steps):
        return ("mma_qk issued ahead of the softmax would overwrite the scores it reads "
                "(a second S buffer makes ptxas serialise the MMAs, C7514)")
    if not ("rescale" in steps and "mma_pv" in steps and steps["rescale"] < steps["mma_pv"]):
        return "P is packed in rescale, which must come before mma_pv of its trip"
    if "transpose_v" in steps and not (
            steps["rescale"] - length < steps["transpose_v"] < steps["mma_pv"]):
        return ("transpose_v must follow the previous trip's rescale (which waits for the "
                "P V that read the same copy of the transposed v) and come before mma_pv")
    return None


__all__ = ["issue_steps", "order_problem"]
