"""A workload's tensor contract as the workers read it, and an artifact checked against it.

The contract's one home is the operator spec (``OperatorSpec.tensors()``). A job carries
it as data (``Job.tensors``); a job without it (an older caller's, a bench script's) and a
loaded kernel, whose artifact holds only its workload, derive it through
:func:`scheduler_search.ops.workload_tensors`. :func:`contract` is where the two meet, so
the worker's inputs, its checks and ``load``'s checks read one list.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from codegen.artifact import KernelArg, TensorArg, TensorMapArg, WorkspaceArg
from scheduler_search.ops import TensorSpec, workload_tensors

#: A workload's tensors by name, in argument order (inputs, then outputs).
Contract = dict[str, TensorSpec]


def contract(
    op: str, params: dict[str, Any], tensors: Iterable[TensorSpec] | None = None
) -> Contract:
    """The tensors of a workload by name: ``tensors`` where a job carries them, else the
    operator spec's for ``op`` and ``params``."""
    if tensors is None:
        tensors = workload_tensors(op, params)
    return {t.name: t for t in tensors}


def check_tensor_args(
    op: str,
    params: dict[str, Any],
    args: Iterable[KernelArg],
    tensors: Iterable[TensorSpec] | None = None,
) -> dict[str, str]:
    """Check an artifact's arguments against the contract; return the dtype of each tensor.

    A pointer (TensorArg) must have its tensor's shape and role and one of its dtypes; a
    tensor map (TensorMapArg) must name a tensor of the contract, in the dtype the tensor
    has in this kernel. A tensor takes its pointer's dtype, else its first map's, else the
    contract's default (a kernel may ignore an input). Scalars and workspaces (the
    kernel's own scratch memory, allocated by whoever launches it) are not tensors; a
    workspace needs a positive size and a name no tensor has, as it is passed by name too.

    Raises:
        ValueError: naming the first disagreement.
    """
    specs = contract(op, params, tensors)
    picked: dict[str, str] = {}
    maps: list[TensorMapArg] = []
    for arg in args:
        if isinstance(arg, TensorArg):
            _check_pointer(op, specs, arg)
            picked[arg.name] = arg.dtype
        elif isinstance(arg, TensorMapArg):
            _spec_of(op, specs, arg.tensor).in_dtype(arg.dtype)
            maps.append(arg)
        elif isinstance(arg, WorkspaceArg):
            _check_workspace(op, specs, arg)
    for arg in maps:
        dtype = picked.setdefault(arg.tensor, arg.dtype)
        if arg.dtype != dtype:
            raise ValueError(f"tensor map {arg.name!r} has dtype {arg.dtype}, its tensor "
                             f"{arg.tensor!r} is {dtype} in this kernel")
    return {name: picked.get(name, spec.dtype) for name, spec in specs.items()}


def _spec_of(op: str, specs: Contract, name: str) -> TensorSpec:
    spec = specs.get(name)
    if spec is None:
        raise ValueError(f"tensor {name!r} is not part of the {op} contract "
                         f"({', '.join(specs)})")
    return spec


def _check_pointer(op: str, specs: Contract, arg: TensorArg) -> None:
    spec = _spec_of(op, specs, arg.name)
    if tuple(arg.shape) != spec.shape:
        raise ValueError(f"tensor {arg.name!r} has shape {tuple(arg.shape)}, expected "
                         f"{spec.shape}")
    spec.in_dtype(arg.dtype)
    if arg.role != spec.role:
        raise ValueError(f"tensor {arg.name!r} has role {arg.role}, expected {spec.role}")


def _check_workspace(op: str, specs: Contract, arg: WorkspaceArg) -> None:
    if arg.bytes <= 0:
        raise ValueError(f"workspace {arg.name!r} has {arg.bytes} bytes, expected a positive "
                         "size")
    if arg.name in specs:
        raise ValueError(f"workspace {arg.name!r} has the name of a tensor of the {op} "
                         "contract")
