"""Loaded kernels the ``pipetune::`` operators run, named by a string (operators take
strings, not Python objects, so ``torch.compile`` can trace a call that names one)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Kernels the operators run, by key (a kernel's schedule or range hash).
KERNELS: dict[str, Callable[..., Any]] = {}
#: No tuned kernel for that part of the operator.
NO_KERNEL = ""


def register(kernel: Callable[..., Any]) -> str:
    """Keep ``kernel`` (a loaded kernel: its artifact's schedule or range hash names it) for
    the operators; its key."""
    artifact = kernel.artifact  # type: ignore[attr-defined]
    key = str(getattr(artifact, "schedule_hash", None) or artifact.hash)
    KERNELS[key] = kernel
    return key
