"""``mamba2_ssd``: Mamba2's whole SSD forward, ``mamba_chunk_scan_combined``, as a pipeline.

Upstream runs five kernels (docs/mamba2.md). pipetune runs the step sizes and their chunk
sums as PyTorch ops (a few MB of fp32 vectors), then tuned kernels in one of two plans:

- ``cb_in_tile``: the chunk state fused with the state passing, then the chunk scan that
  computes ``C Bᵀ`` in its tile from ``B``;
- ``cb``: the same chunk state, ``C Bᵀ`` per chunk as one batched product in PyTorch
  (upstream's ``_bmm_chunk_fwd``), then the chunk scan reading it.

Both scans are tuned, and the plan served is the one whose measured kernels make the
faster forward. The ``cb`` plan also pays the product that writes ``cb``: its cost is the
difference of the two scans' peers (the in-tile scan's peer runs ``_bmm_chunk_fwd``
before upstream's scan, the other scan's peer the scan alone), measured in the same
worker as the kernels.
"""

from __future__ import annotations

from typing import Any, ClassVar

from scheduler_search.ops._base import OperatorSpec
from scheduler_search.ops.mamba2 import Mamba2ChunkScanSpec, Mamba2ChunkStateSpec, Mamba2Shape
from scheduler_search.ops.pipelines import (
    Figures,
    PipelineSpec,
    register_pipeline,
    summed_latency_us,
)

#: The shape fields the pipeline hands to each of its kernels.
_SHAPE = tuple(Mamba2Shape.model_fields)


@register_pipeline
class Mamba2SSDSpec(PipelineSpec, Mamba2Shape):
    """Mamba2's SSD forward (``mamba_chunk_scan_combined``): chunk state with the state
    passing, then the chunk scan, reading ``C Bᵀ`` or computing it in its tile."""

    op: ClassVar[str] = "mamba2_ssd"
    kernel_ops: ClassVar[tuple[str, ...]] = ("mamba2_chunk_state", "mamba2_chunk_scan")

    #: The gate ``z`` (``out · z sigmoid(z)``), applied by the scan's store.
    z: bool = False
    #: ``D`` per channel (nheads, headdim) rather than per head.
    d_per_channel: bool = False
    #: An fp32 ``initial_states`` input entering the first chunk.
    initial_states: bool = False
    #: The states handed from the chunk state to the scan in fp32
    #: (``state_dtype=torch.float32``) rather than in the inputs' dtype, as upstream does.
    states_in_fp32: bool = False

    def kernels(self) -> dict[str, OperatorSpec]:
        shape = {name: getattr(self, name) for name in _SHAPE}
        scan = {**shape, "z": self.z, "d_per_channel": self.d_per_channel}
        return {
            "state": Mamba2ChunkStateSpec.model_validate(
                {**shape, "pass_states": True, "initial_states": self.initial_states,
                 "states_in_fp32": self.states_in_fp32}),
            "scan": Mamba2ChunkScanSpec.model_validate(scan),
            "scan_in_tile": Mamba2ChunkScanSpec.model_validate({**scan, "cb_in_tile": True}),
        }

    def plans(self) -> dict[str, tuple[str, ...]]:
        # The fused plan first: where nothing is measured, it is the one served.
        return {"cb_in_tile": ("state", "scan_in_tile"), "cb": ("state", "scan")}

    def plan_latency_us(self, plan: str, figures: Figures) -> float | None:
        kernels = summed_latency_us(self.plans()[plan], figures)
        if kernels is None or plan == "cb_in_tile":
            return kernels
        return kernels + gram_latency_us(figures.get("scan_in_tile"), figures.get("scan"))


def gram_latency_us(in_tile: dict[str, Any] | None, reading_cb: dict[str, Any] | None) -> float:
    """What writing ``C Bᵀ`` before the scan costs: the in-tile scan's peer (the product,
    then upstream's scan) less the other scan's (the scan alone); 0 where either peer's
    time is unknown, so that the fused scan must then beat the other scan by itself."""
    peers = [(figures or {}).get("baseline_latency_us") for figures in (in_tile, reading_cb)]
    if None in peers:
        return 0.0
    return max(0.0, float(peers[0]) - float(peers[1]))


__all__ = ["Mamba2SSDSpec", "gram_latency_us"]
