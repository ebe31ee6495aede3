"""The table from sTask kind and sEU to the skeleton's emitter of that sTask.

As tinygrad's renderer maps each IR op to its line of C, each row here writes one sTask
instance into the kernel (through the operator's hooks where the text is the operator's)
and records it. A kind and sEU with no row cannot be lowered: the layout reports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from codegen.pipeline import epilogue
from codegen.pipeline.structure import Issue
from scheduler_search.hardware.model import UnitKind
from scheduler_search.ir import STaskKind

if TYPE_CHECKING:
    from codegen.pipeline.code import Code
    from codegen.pipeline.skeleton import PipelineSkeleton

Emitter = Callable[["PipelineSkeleton", tuple[str, ...], Issue], None]


def emit_tile_load(k: PipelineSkeleton, roles: tuple[str, ...], issue: Issue) -> None:
    """A load sTask on TMA (or, without it, the loading threads' ``cp.async``), inside its
    ring's load function: the operator's boxes into ``stage``, completing on the stage's
    full barrier."""
    tile = k.hooks.operand(issue.stask)
    ring = k.ring_of(issue.stask)
    stage = "stage" if ring else "tile"
    k.code.comment(f"{issue.stask}  stage={stage}: {tile.rows}x{tile.cols} tile via "
                   f"{'TMA' if issue.unit is UnitKind.TMA else 'cp.async'}, "
                   f"{tile.box_count} box(es)")
    dst = f"smem + SMEM_{tile.const}" + (f" + stage * {tile.const}_STAGE_BYTES" if ring else "")
    if not ring and k.structure.owners > 1:  # the owner's copy of a tile buffer
        dst += f" + owner * {tile.const}_STAGE_BYTES"
    k.hooks.load(k.code, issue.stask, dst, "trip" if ring else "0", "full")
    k.recorded(roles, issue, f"{ring.stream}[s]" if ring else "once per tile")


def _stages_read(k: PipelineSkeleton, issue: Issue) -> dict[str, str]:
    """The ring stages ``issue`` reads: stream -> the variable holding its stage."""
    return {r.stream: f"{r.stream}_stage" for r in k.structure.rings
            if issue.stask in k.readers_of(r)}


def emit_mma(k: PipelineSkeleton, roles: tuple[str, ...], issue: Issue) -> None:
    """An MMA sTask on the tensor cores: the operator's MMA group over the stages of the
    rings it reads; it overwrites the accumulators on the first trip (``k.at``)."""
    stages = _stages_read(k, issue)
    k.hooks.mma(k.code, issue, stages, k.at)
    stage = ",".join(f"{s}[s]" for s in stages)
    k.recorded(roles, issue, stage)


def emit_register_math(k: PipelineSkeleton, roles: tuple[str, ...], issue: Issue) -> None:
    """An elementwise or reduction sTask on the CUDA cores or the SFU: the operator's math
    on the consumers' register tiles (after the MMA results it reads are waited for), or
    a relayout of a ring stage into a consumer's own shared tile.
    Epilogue math the operator writes element by element is handed to the store, which
    applies it to each pair of accumulators as it writes them."""
    if issue.phase == "epilogue" and issue.stask in k.hooks.element_stasks:
        k.code.comment(f"{issue.stask}  on {issue.unit.value}: applied by the store, pair by "
                       "pair")
        k.element_math.append(issue.stask)
        k.recorded(roles, issue, "registers")
        return
    k.code.comment(f"{issue.stask}  on {issue.unit.value}")
    if issue.stask in k.hooks.relayout_stasks:  # a ring stage laid out again for the MMA
        stages = _stages_read(k, issue)
        k.hooks.relayout(k.code, issue, stages, k.at)
        k.recorded(roles, issue, ",".join(f"{s}[s]" for s in stages))
        return
    k.hooks.math(k.code, issue, k.at)
    k.recorded(roles, issue, "registers")


def emit_thread_load(k: PipelineSkeleton, roles: tuple[str, ...], issue: Issue) -> None:
    """A load sTask on the CUDA cores: each consumer thread reads its part of the tile
    from global memory straight into registers (small vectors such as Mamba2's dt)."""
    k.code.comment(f"{issue.stask}  on {issue.unit.value}: global -> registers")
    k.hooks.thread_load(k.code, issue, k.at)
    k.recorded(roles, issue, "registers")


def emit_tma_store(k: PipelineSkeleton, roles: tuple[str, ...], issue: Issue) -> None:
    """A store sTask on TMA: the epilogue through swizzled shared memory."""
    epilogue.emit_tma_store(k.code, k.layout, _pending_element_math(k))
    k.recorded(roles, issue, k.layout.staging)


def emit_direct_store(k: PipelineSkeleton, roles: tuple[str, ...], issue: Issue) -> None:
    """A store sTask on the CUDA cores: st.global from the accumulators after the loop;
    inside it, the operator's (a part of an output added to global memory every trip)."""
    if issue.phase == "loop":
        k.code.comment(f"{issue.stask}  on {issue.unit.value}: registers -> global")
        k.hooks.loop_store(k.code, issue, k.at)
        k.recorded(roles, issue, "global")
        return
    epilogue.emit_direct_store(k.code, k.layout, _pending_element_math(k))
    k.recorded(roles, issue, "")


def _pending_element_math(k: PipelineSkeleton) -> epilogue.ElementMath | None:
    """The element math handed to this store (in sTask order), and none to the next."""
    stasks, k.element_math = list(k.element_math), []
    if not stasks:
        return None

    def apply(code: Code, row: str, col: str) -> None:
        for stask in stasks:
            k.hooks.element_math(code, stask, row, col)

    return apply


#: sTask kinds written by the operator's register math.
MATH_KINDS = (STaskKind.ELEMENTWISE, STaskKind.REDUCE)

#: (sTask kind, sEU) -> emitter, as tinygrad's renderer maps each op to its C.
EMITTERS: dict[tuple[STaskKind, UnitKind], Emitter] = {
    (STaskKind.LOAD, UnitKind.TMA): emit_tile_load,
    (STaskKind.LOAD, UnitKind.LSU): emit_tile_load,
    (STaskKind.LOAD, UnitKind.CUDA_CORE): emit_thread_load,
    (STaskKind.MMA, UnitKind.TENSOR_CORE): emit_mma,
    (STaskKind.ELEMENTWISE, UnitKind.CUDA_CORE): emit_register_math,
    (STaskKind.ELEMENTWISE, UnitKind.SFU): emit_register_math,
    (STaskKind.REDUCE, UnitKind.CUDA_CORE): emit_register_math,
    (STaskKind.STORE, UnitKind.TMA): emit_tma_store,
    (STaskKind.STORE, UnitKind.CUDA_CORE): emit_direct_store,
}
