"""Lowering: an sProgram and an operator's hooks to kernel text and its launch contract."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from codegen.artifact import (
    KernelArg,
    KernelArtifact,
    ScalarArg,
    SizeSlot,
    TensorArg,
    TensorMapArg,
    WorkspaceArg,
)
from codegen.pipeline import epilogue, stream_k
from codegen.pipeline.hooks import OperatorHooks
from codegen.pipeline.layout import PipelineLayout
from codegen.pipeline.record import EmissionRecord
from codegen.pipeline.skeleton import PipelineSkeleton
from codegen.pipeline.structure import PipelineStructure
from scheduler_search.hardware.model import Device
from scheduler_search.ops import parse_spec
from scheduler_search.sprogram import SProgram

#: Bumped whenever the skeleton's text changes for the same schedule.
PIPELINE_VERSION = "pipeline-5"


class Unsupported(ValueError):
    """The schedule is valid but cannot be generated (kept out of the space)."""


def plan(sprogram: SProgram, hooks: type[OperatorHooks], device: Device) -> PipelineLayout:
    """The skeleton's plan of ``sprogram`` with ``hooks`` (nothing is written yet)."""
    structure = PipelineStructure(sprogram)
    return PipelineLayout(structure, hooks(structure), device)


@dataclass(frozen=True)
class Lowered:
    """A kernel as written: its text, its plan, and the record of what was emitted."""

    source: str
    entry: str
    layout: PipelineLayout
    record: EmissionRecord

    def artifact(self, extra: dict[str, Any] | None = None) -> KernelArtifact:
        """The launch contract: tensor maps from the same plan as the text; for a kernel
        that takes sizes at run time, where each size goes (``extra["size_slots"]``)."""
        lay = self.layout
        sp = lay.structure.sprogram
        slots = size_slots(lay) if lay.runtime_dims else ()
        return KernelArtifact(
            op=sp.op,
            params=dict(sp.params),
            schedule_hash=sp.hash,
            source=self.source,
            entry=self.entry,
            grid=(lay.grid, 1, 1),
            block=(lay.structure.threads, 1, 1),
            cluster=(lay.structure.cluster_size, 1, 1),
            dynamic_smem_bytes=lay.smem.dynamic_bytes,
            args=launch_args(lay),
            compile_options=lay.hooks.target.compile_options_for(lay.device),
            extra={
                "smem_layout": lay.smem.layout(),
                "staging": lay.staging,
                "tiles": lay.tiles,
                "units": lay.units,
                **({"size_slots": [asdict(slot) for slot in slots]} if slots else {}),
                **({"code_arch": sp.arch} if tuple(lay.device.compute_capability)
                   != lay.hooks.target.compute_capability else {}),
                **(extra or {}),
            },
        )


def launch_args(lay: PipelineLayout) -> tuple[KernelArg, ...]:
    """The kernel's arguments in parameter order, for the workload ``lay`` is planned at."""
    sp = lay.structure.sprogram
    out = lay.output
    args: list[KernelArg] = list(lay.hooks.tensor_maps())
    if lay.tma_store:
        args.append(epilogue.store_tensor_map(lay))
    # Shapes from the operator's tensor contract (its one home: the spec).
    shapes = {t.name: t.shape for t in parse_spec(sp.op, sp.params).tensors()}
    if not lay.tma_store:
        args.append(TensorArg(out.tensor, out.dtype, tuple(shapes[out.tensor]), "output"))
    if out.second is not None:
        name = out.second.tensor
        args.append(TensorArg(name, out.dtype, tuple(shapes[name]), "output"))
    for name in lay.hooks.side_outputs():
        args.append(TensorArg(name, lay.tensor_dtypes[name], tuple(shapes[name]), "output"))
    for name in lay.hooks.pointer_inputs():
        args.append(TensorArg(name, lay.tensor_dtypes[name], tuple(shapes[name]), "input"))
    args += lay.hooks.workspaces()
    if lay.stream_k is not None:
        args.append(WorkspaceArg(stream_k.WORKSPACE, lay.stream_k_workspace_bytes))
    for dim in lay.runtime_dims:
        args.append(ScalarArg(lay.hooks.size_arg(dim), "int32", int(sp.params[dim])))
    return tuple(args)


def size_slots(lay: PipelineLayout) -> tuple[SizeSlot, ...]:
    """Where each run-time size appears in the launch contract: the arguments planned at
    a neighbouring size are compared with these; every value that moves must be a whole
    multiple of the size (a scalar, a tensor's extent, a TMA descriptor's extent or an
    outer stride: attention's batch stride over its sequence).

    Raises:
        Unsupported: a value moves with a size in another way (a box, a workspace).
    """
    sp = lay.structure.sprogram
    here = launch_args(lay)
    slots: list[SizeSlot] = []
    for dim in lay.runtime_dims:
        size = int(sp.params[dim])
        other = size - 1 if size > 1 else size + 1
        moved = replace(sp, params={**sp.params, dim: other})
        there = launch_args(PipelineLayout(PipelineStructure(moved),
                                           type(lay.hooks)(PipelineStructure(moved)),
                                           lay.device))
        for a, b in zip(here, there, strict=True):
            slots += _moved_values(dim, a, b, size, other)
    return tuple(slots)


def _moved_values(dim: str, a: KernelArg, b: KernelArg, size: int,
                  other: int) -> list[SizeSlot]:
    """The slots of ``dim`` in argument ``a`` (planned at ``size``) against ``b`` (at
    ``other``)."""
    if isinstance(a, ScalarArg):
        fields: dict[str, tuple[Any, ...]] = {"value": (a.value,)}
    elif isinstance(a, TensorArg):
        fields = {"shape": a.shape}
    elif isinstance(a, TensorMapArg):
        fields = {"global_dims": a.global_dims, "global_strides_bytes": a.global_strides_bytes}
    else:
        fields = {}
    if isinstance(a, TensorMapArg) and a.box_dims != b.box_dims:
        raise Unsupported(f"{a.name}: the box moves with {dim}")
    if isinstance(a, WorkspaceArg) and a.bytes != b.bytes:
        raise Unsupported(f"{a.name}: the workspace grows with {dim}")
    slots = []
    for name, values in fields.items():
        theirs = (b.value,) if name == "value" else getattr(b, name)
        for index, (mine, their) in enumerate(zip(values, theirs, strict=True)):
            if mine == their:
                continue
            scale = (mine - their) // (size - other)
            if mine != scale * size or their != scale * other:
                raise Unsupported(f"{a.name}.{name}[{index}] is not a multiple of {dim}")
            slots.append(SizeSlot(dim, a.name, name, index, scale))  # type: ignore[arg-type]
    return slots


def lower(sprogram: SProgram, hooks: type[OperatorHooks], device: Device) -> Lowered:
    """Write ``sprogram``'s kernel on the skeleton with ``hooks``.

    Raises:
        Unsupported: the skeleton or the operator cannot lower this schedule.
    """
    layout = plan(sprogram, hooks, device)
    problem = layout.problem()
    if problem:
        raise Unsupported(problem)
    skeleton = PipelineSkeleton(layout, f"pipetune_{sprogram.op}_{sprogram.hash[:16]}")
    source = skeleton.source()
    return Lowered(source, skeleton.entry, layout, skeleton.record)
