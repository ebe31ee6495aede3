"""The one entry of code generation: an sProgram to a KernelArtifact.

Renderers are looked up by operator in :data:`RENDERERS`; each takes the sProgram and the
device (for SM count and shared-memory limit) and returns the artifact, or raises
:class:`~codegen.kernels.Unsupported` for a schedule it cannot generate. The schedule
space asks :func:`unsupported` first, so such schedules never reach a compiler.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from codegen.artifact import KernelArtifact
from codegen.kernels.gemm import GEMM_CODEGEN_VERSION, Unsupported, gemm_unsupported, render_gemm
from scheduler_search.hardware.catalog import CATALOG
from scheduler_search.hardware.model import Device
from scheduler_search.sprogram import SProgram

Renderer = Callable[[SProgram, Device], KernelArtifact]
Checker = Callable[[Any, dict[str, Any], Device], "str | None"]

#: Version of code generation as a whole, part of a GPU's device fingerprint (cache key):
#: a change to any renderer's output must change it, so cached kernels are re-tuned.
CODEGEN_VERSION = GEMM_CODEGEN_VERSION

#: op -> (renderer, support check).
RENDERERS: dict[str, tuple[Renderer, Checker]] = {
    "gemm": (render_gemm, gemm_unsupported),
}


def default_device(arch: str) -> Device:
    """The catalog device a schedule for ``arch`` is rendered for when none is given."""
    for device in CATALOG.values():
        if device.arch == arch:
            return device
    raise ValueError(f"no catalog device of architecture {arch}")


def has_renderer(op: str) -> bool:
    return op in RENDERERS


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
        KeyError: no renderer for the operator.
        Unsupported: the renderer cannot generate this schedule.
    """
    if sprogram.op not in RENDERERS:
        raise KeyError(f"no renderer for {sprogram.op!r}; have {', '.join(RENDERERS)}")
    if spec is not None and spec.params() != sprogram.params:
        raise ValueError("spec and sProgram describe different workloads")
    renderer, _ = RENDERERS[sprogram.op]
    return renderer(sprogram, device or default_device(sprogram.arch))


def unsupported(schedule: Any, spec: Any, device: Device) -> str | None:
    """Why ``schedule`` (an SProgram, or the Decisions it is emitted from) of ``spec``
    cannot be rendered for ``device``, or None. Operators without a renderer answer None:
    their spaces are not restricted (yet)."""
    if spec.op not in RENDERERS:
        return None
    _, check = RENDERERS[spec.op]
    return check(schedule, spec.params(), device)


__all__ = [
    "CODEGEN_VERSION",
    "RENDERERS",
    "Unsupported",
    "default_device",
    "has_renderer",
    "render",
    "unsupported",
]
