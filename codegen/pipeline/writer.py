"""What the writers of a kernel's parts share: the skeleton they write on (its code, plan,
hooks, target and record)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from codegen.pipeline.skeleton import PipelineSkeleton


class RoleWriter:
    """A part of the kernel written on the skeleton ``k``: the same code buffer, plan,
    operator hooks, target and emission record (the tile loop, the loader, the
    consumers)."""

    def __init__(self, k: PipelineSkeleton) -> None:
        self.k = k
        self.code, self.record = k.code, k.record
        self.layout, self.structure, self.hooks = k.layout, k.structure, k.hooks
        self.target = k.hooks.target
