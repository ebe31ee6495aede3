"""The sTask-graph IR: sTasks, tensor accesses, graphs, tile shapes and Propagate."""

from scheduler_search.ir.graph import (
    PropagateError,
    STaskGraph,
    Tensor,
    TilePlan,
    TileShape,
    propagate,
)
from scheduler_search.ir.stask import Phase, STask, STaskKind, TensorAccess

__all__ = [
    "Phase",
    "PropagateError",
    "STask",
    "STaskGraph",
    "STaskKind",
    "Tensor",
    "TensorAccess",
    "TilePlan",
    "TileShape",
    "propagate",
]
