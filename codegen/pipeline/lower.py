"""Lowering: an sProgram and an operator's hooks to kernel text and its launch contract."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codegen.artifact import KernelArg, KernelArtifact, TensorArg, WorkspaceArg
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

COMPILE_OPTIONS = ("-std=c++17", "-arch=sm_90a")


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
        """The launch contract: tensor maps from the same plan as the text."""
        lay = self.layout
        sp = lay.structure.sprogram
        out = lay.output
        args: list[KernelArg] = list(lay.hooks.tensor_maps())
        if lay.tma_store:
            args.append(epilogue.store_tensor_map(lay))
        # Shapes from the operator's tensor contract (its one home: the spec).
        shapes = {t.name: t.shape for t in parse_spec(sp.op, sp.params).tensors()}
        if not lay.tma_store:
            args.append(TensorArg(out.tensor, out.dtype, tuple(shapes[out.tensor]), "output"))
        for name in lay.hooks.side_outputs():
            args.append(TensorArg(name, "float32", tuple(shapes[name]), "output"))
        for name in lay.hooks.pointer_inputs():
            args.append(TensorArg(name, lay.tensor_dtypes[name], tuple(shapes[name]), "input"))
        if lay.stream_k is not None:
            args.append(WorkspaceArg(stream_k.WORKSPACE, lay.stream_k_workspace_bytes))
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
            args=tuple(args),
            compile_options=COMPILE_OPTIONS,
            extra={
                "smem_layout": lay.smem.layout(),
                "staging": lay.staging,
                "tiles": lay.tiles,
                "units": lay.units,
                **(extra or {}),
            },
        )


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
