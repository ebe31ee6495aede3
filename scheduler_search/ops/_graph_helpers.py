"""Small constructors that keep the per-operator graph builders readable."""

from __future__ import annotations

from scheduler_search.hardware.model import UnitKind
from scheduler_search.ir import Phase, STask, STaskKind, Tensor, TensorAccess

TMA_OR_CORES = (UnitKind.TMA, UnitKind.CUDA_CORE)
"""Small vectors (dt, dA) and outputs may be moved by TMA or by plain thread loads/stores."""

TMA_OR_LSU = (UnitKind.TMA, UnitKind.LSU)

TC = (UnitKind.TENSOR_CORE,)
"""Matrix products: the tensor cores only."""

CORES = (UnitKind.CUDA_CORE,)
"""Row statistics, scaling, conversions: the CUDA cores only."""

EXP_UNITS = (UnitKind.SFU, UnitKind.CUDA_CORE)
"""exp2 runs on the SFU, or as a polynomial on the FMA lanes (as FlashAttention-4 does)."""

#: FMA-pipe operations of exp2 emulated without the SFU: range reduction, a degree-3
#: polynomial and the exponent splice (as FlashAttention-4 does; estimate).
EXP2_EMULATION_OPS = 8.0
"""Tiles: TMA on sm_90, cp.async through the LSU on sm_80."""


def packed_heads(tile: dict[str, int] | None) -> int:
    """Heads packed into one tile (the ``g`` tile, default 1): attention's query heads of a
    kv group, Mamba2 chunk state's heads of a B group; what they share is loaded once."""
    return int((tile or {}).get("g", 1))


def access(text: str) -> TensorAccess:
    """Parse ``name[ax1,ax2]`` into a TensorAccess."""
    name, _, rest = text.partition("[")
    axes = tuple(a.strip() for a in rest.rstrip("]").split(",") if a.strip())
    return TensorAccess(name.strip(), axes)


def stask(
    name: str,
    kind: STaskKind,
    output: str,
    inputs: tuple[str, ...],
    units: tuple[UnitKind, ...],
    *,
    phase: Phase = "loop",
    ops_per_point: float = 0.0,
    emulation_ops: float = 1.0,
    expr: str = "",
) -> STask:
    return STask(
        name=name,
        kind=kind,
        output=access(output),
        inputs=tuple(access(i) for i in inputs),
        units=units,
        phase=phase,
        ops_per_point=ops_per_point,
        emulation_ops=emulation_ops,
        expr=expr,
    )


def tensors(**spaces: tuple[str, ...]) -> dict[str, Tensor]:
    """``tensors(a=("float16", "global"), ...)`` -> name -> Tensor; a third element names
    the dead tensor whose registers a register tensor reuses."""
    return {name: Tensor(name, *fields) for name, fields in spaces.items()}  # type: ignore[arg-type]
