"""The one entry of code generation: an sProgram to a KernelArtifact.

Each operator with code generation is a set of hooks on the pipeline skeleton
(:mod:`codegen.pipeline`), looked up in :data:`HOOKS` (:func:`register_hooks` adds one).
:func:`unsupported` says why a schedule cannot be generated; the schedule space is given
it as its feasibility check (:func:`feasibility`), so such schedules never reach a
compiler.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from codegen.artifact import KernelArtifact
from codegen.kernels.attention import ATTENTION_HOOKS_VERSION, AttentionHooks
from codegen.kernels.attention_backward import (
    ATTENTION_BACKWARD_HOOKS_VERSION,
    AttentionBackwardHooks,
)
from codegen.kernels.gemm import GEMM_HOOKS_VERSION, GemmHooks
from codegen.kernels.mamba2 import (
    CHUNK_SCAN_HOOKS_VERSION,
    CHUNK_STATE_HOOKS_VERSION,
    ChunkScanHooks,
    ChunkStateHooks,
)
from codegen.pipeline import OperatorHooks
from codegen.pipeline.lower import PIPELINE_VERSION, Lowered, Unsupported, lower, plan
from codegen.targets import TARGETS, target_for
from scheduler_search.hardware.catalog import CATALOG
from scheduler_search.hardware.model import Device
from scheduler_search.ops import OperatorSpec, parse_spec
from scheduler_search.sprogram import SProgram

#: op -> its hooks on the pipeline skeleton and their version (:func:`register_hooks`).
HOOKS: dict[str, type[OperatorHooks]] = {
    "gemm": GemmHooks,
    "attention": AttentionHooks,
    "attention_backward": AttentionBackwardHooks,
    "mamba2_chunk_state": ChunkStateHooks,
    "mamba2_chunk_scan": ChunkScanHooks,
}
HOOKS_VERSIONS: dict[str, str] = {
    "gemm": GEMM_HOOKS_VERSION,
    "attention": ATTENTION_HOOKS_VERSION,
    "attention_backward": ATTENTION_BACKWARD_HOOKS_VERSION,
    "mamba2_chunk_state": CHUNK_STATE_HOOKS_VERSION,
    "mamba2_chunk_scan": CHUNK_SCAN_HOOKS_VERSION,
}


def register_hooks(op: str, hooks: type[OperatorHooks], version: str) -> None:
    """Give operator ``op`` code generation: ``hooks`` on the pipeline skeleton, whose
    ``version`` changes whenever their text does (it joins :func:`codegen_version`)."""
    HOOKS[op] = hooks
    HOOKS_VERSIONS[op] = version


def codegen_version() -> str:
    """Version of code generation as a whole, part of a GPU's device fingerprint (cache
    key): a change to the skeleton's or any operator's output must change it, so cached
    kernels are re-tuned."""
    return "+".join((PIPELINE_VERSION, *HOOKS_VERSIONS.values()))


Feasibility = Callable[[SProgram], "str | None"]


def default_device(arch: str) -> Device:
    """The catalog device a schedule for ``arch`` is rendered for when none is given."""
    for device in CATALOG.values():
        if device.arch == arch:
            return device
    raise ValueError(f"no catalog device of architecture {arch}")


def has_renderer(op: str) -> bool:
    return op in HOOKS


def lowering(sprogram: SProgram, device: Device | None = None) -> Lowered:
    """The kernel of ``sprogram`` as written: text, plan and emission record.

    Raises:
        KeyError: no hooks for the operator.
        Unsupported: the skeleton or the operator cannot lower this schedule.
    """
    if sprogram.op not in HOOKS:
        raise KeyError(f"no code generation for {sprogram.op!r}; have {', '.join(HOOKS)}")
    return lower(sprogram, HOOKS[sprogram.op], device or default_device(sprogram.arch))


def render(
    sprogram: SProgram, spec: Any = None, device: Device | None = None
) -> KernelArtifact:
    """The CUDA source and launch contract of ``sprogram``.

    Args:
        sprogram: the schedule (its ``params`` are the workload).
        spec: the operator spec; only checked against the sProgram's params.
        device: the target (SM count for persistent grids, shared-memory limit);
            default: the catalog device of the sProgram's architecture.

    Raises:
        KeyError: no code generation for the operator.
        Unsupported: the schedule cannot be generated.
    """
    if spec is not None and spec.params() != sprogram.params:
        raise ValueError("spec and sProgram describe different workloads")
    lowered = lowering(sprogram, device)
    return lowered.artifact({
        "codegen_version": codegen_version(),
        "flops": parse_spec(sprogram.op, sprogram.params).flops(),
        # Which point of the search space this is, for the artifact's readers; code
        # generation itself never reads the choices.
        "choices": dict(sprogram.choices),
    })


def unsupported(sprogram: SProgram, device: Device) -> str | None:
    """Why ``sprogram`` cannot be generated for ``device``, or None."""
    if sprogram.op not in HOOKS:
        return f"no code generation for {sprogram.op}"
    return plan(sprogram, HOOKS[sprogram.op], device).problem()


@dataclass(frozen=True)
class CodegenCheck:
    """The code generator's check for one device, as a schedule space asks it: of a whole
    tile first (:meth:`tile_problem`, no sProgram planned), then of each sProgram."""

    device: Device

    def __call__(self, sprogram: SProgram) -> str | None:
        return unsupported(sprogram, self.device)

    def tile_problem(self, spec: OperatorSpec, tile: dict[str, int]) -> str | None:
        hooks = HOOKS.get(spec.op)
        if hooks is None:
            return None
        return hooks.tile_problem(spec.params(), tile, target_for(self.device.arch))


def feasibility(op: str, device: Device) -> Feasibility | None:
    """The check a schedule space of ``op`` on ``device`` is restricted by, or None where
    code generation does not apply: operators without hooks and architectures no target
    runs on (a GPU the catalog states neither Hopper's nor the Ampere class's
    instructions for) are tuned on the simulated device, over the cost model's whole
    space."""
    target = TARGETS.get(device.arch)
    if op not in HOOKS or target is None or not target.runs_on(device):
        return None
    return CodegenCheck(device)


__all__ = [
    "HOOKS",
    "HOOKS_VERSIONS",
    "CodegenCheck",
    "Feasibility",
    "Unsupported",
    "codegen_version",
    "default_device",
    "feasibility",
    "has_renderer",
    "lowering",
    "register_hooks",
    "render",
    "unsupported",
]
