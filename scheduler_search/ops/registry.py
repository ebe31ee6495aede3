"""The operators pipetune knows, by name: the table the API, the CLI and the schedule
space dispatch on. A new operator registers its spec class here
(:func:`register_operator`), its knob rows with the space
(``scheduler_search.space.knob_rows``), and, where it has them, its kernel hooks, fp32
reference and peers with code generation and the workers."""

from __future__ import annotations

from scheduler_search.ops._base import OperatorSpec
from scheduler_search.ops.attention import AttentionSpec
from scheduler_search.ops.attention_backward import AttentionBackwardSpec
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.ops.mamba2 import Mamba2ChunkScanSpec, Mamba2ChunkStateSpec

#: Operator name -> spec class.
OPERATORS: dict[str, type[OperatorSpec]] = {
    spec.op: spec for spec in (GemmSpec, AttentionSpec, AttentionBackwardSpec,
                               Mamba2ChunkScanSpec, Mamba2ChunkStateSpec)
}


def register_operator(spec: type[OperatorSpec]) -> None:
    """Make ``spec`` the spec class of operator ``spec.op`` (a second registration of a
    name replaces it)."""
    OPERATORS[spec.op] = spec


def runtime_dims(op: str) -> tuple[str, ...]:
    """The dimensions ``op``'s kernels may take at run time (none for an unknown one)."""
    spec = OPERATORS.get(op)
    return spec.runtime_dims if spec is not None else ()


__all__ = ["OPERATORS", "register_operator", "runtime_dims"]
