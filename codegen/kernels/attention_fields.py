"""The workload fields both attention kernels (forward and backward) read the same way."""

from __future__ import annotations

from typing import Any


class AttentionFields:
    """An attention kernel's shape: its params and its sProgram's q and kv tiles (a mixin
    of the operator hooks, which hold ``params`` and ``sprogram``)."""

    params: dict[str, Any]
    sprogram: Any

    def _p(self, name: str) -> int:
        return int(self.params[name])

    @property
    def causal(self) -> bool:
        return bool(self.params["causal"])

    @property
    def heads_second(self) -> bool:
        """Layout ``bhsd`` (batch, heads, seq, head_dim), else ``bshd``."""
        return self.params.get("layout", "bshd") == "bhsd"

    @property
    def head_dim(self) -> int:
        return self._p("head_dim")

    @property
    def tile_q(self) -> int:
        return int(self.sprogram.tile["q"])

    @property
    def tile_kv(self) -> int:
        return int(self.sprogram.tile["kv"])


__all__ = ["AttentionFields"]
