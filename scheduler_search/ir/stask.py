"""sTasks: the smallest units of work, each bound to one kind of sEU.

An sTask reads input tiles and writes one output tile. Its tensor expression is written
in index notation over named loop axes (``acc[m,n] += a[m,k] * b[k,n]``); the accesses
are what Propagate walks to infer tile shapes, and the axes that appear in them say
whether the sTask repeats in the reduction loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from scheduler_search.hardware.model import UnitKind

#: Where an sTask sits relative to the reduction loop of its output tile.
Phase = Literal["prologue", "loop", "epilogue"]


class STaskKind(StrEnum):
    """What an sTask does; decides how its cost is counted.

    Attributes:
        LOAD: global -> shared copy of a tile (bytes).
        MMA: matrix multiply-accumulate (2 flops per point of its iteration space).
        ELEMENTWISE: per-element math on a register tile (``ops_per_point`` lane ops).
        REDUCE: a row reduction (``ops_per_point`` lane ops per input element).
        STORE: registers/shared -> global copy of the output tile (bytes).
    """

    LOAD = "load"
    MMA = "mma"
    ELEMENTWISE = "elementwise"
    REDUCE = "reduce"
    STORE = "store"


@dataclass(frozen=True)
class TensorAccess:
    """A tensor indexed by loop axes, e.g. ``a[m,k]``."""

    tensor: str
    axes: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.tensor}[{','.join(self.axes)}]"


@dataclass(frozen=True)
class STask:
    """One tile-level task of an sTask-graph.

    Args:
        name: unique within the graph (``load_a``, ``mma_qk``); the name used in sPrograms,
            generated code comments and the timeline.
        kind: what it does (cost accounting).
        output: the tile it writes.
        inputs: the tiles it reads.
        units: sEU kinds that can run it, preferred first.
        phase: before the reduction loop (once per tile), in it (once per iteration), or
            after it.
        ops_per_point: lane operations per point of the iteration space (ELEMENTWISE /
            REDUCE); ignored for LOAD, STORE and MMA.
        emulation_ops: lane operations per point when the sTask runs on an sEU other than
            its first (exp2 as a polynomial on the FMA lanes instead of one SFU op).
        expr: the tensor expression, for people.
        every_trips: a loop sTask that runs once every this many trips (the state passing
            of a chunk state that walks every chunk: once per chunk); its work is charged
            to each trip in that share.
    """

    name: str
    kind: STaskKind
    output: TensorAccess
    inputs: tuple[TensorAccess, ...]
    units: tuple[UnitKind, ...]
    phase: Phase = "loop"
    ops_per_point: float = 0.0
    emulation_ops: float = 1.0
    expr: str = ""
    every_trips: int = 1

    @property
    def axes(self) -> tuple[str, ...]:
        """The iteration space: every axis of the output, then the inputs' new ones."""
        seen: list[str] = list(self.output.axes)
        for access in self.inputs:
            seen.extend(a for a in access.axes if a not in seen)
        return tuple(seen)

    def reads(self, tensor: str) -> bool:
        return any(access.tensor == tensor for access in self.inputs)
