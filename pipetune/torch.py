"""Tuned kernels inside PyTorch programs: a custom operator ``torch.compile`` can trace.

    import torch
    import pipetune.torch

    gemm = pipetune.torch.register(artifact)        # torch.ops.pipetune.gemm_<hash12>
    model = torch.compile(lambda a, b: gemm(a, b).relu(), fullgraph=True)

:func:`register` wraps the loaded kernel in ``torch.library.custom_op`` with a fake (meta)
implementation that says what it returns (the contract's output shapes and dtypes, on the
inputs' device) without running it, which is what tracing needs.
"""

from __future__ import annotations

from typing import Any

from pipetune import load


def register(artifact: Any, name: str | None = None) -> Any:
    """Register a tuned kernel as the custom operator ``pipetune::<name>`` and return it.

    Args:
        artifact: what :func:`pipetune.load` takes (a KernelArtifact, its dict or JSON).
        name: the operator's name in the ``pipetune`` namespace (default
            ``<op>_<schedule hash[:12]>``, unique per kernel).

    The operator takes the kernel's input tensors positionally, in contract order, and
    returns its output (attention: ``(o, lse)``), allocated by the call.
    """
    import torch

    kernel = load(artifact)
    art = kernel.artifact
    qualname = f"pipetune::{name or f'{art.op}_{art.schedule_hash[:12]}'}"
    inputs = ", ".join(f"Tensor {t.name}" for t in kernel.inputs)
    outputs = list(kernel.outputs)
    returns = "Tensor" if len(outputs) == 1 else f"({', '.join('Tensor' for _ in outputs)})"
    schema = f"({inputs}) -> {returns}"

    @torch.library.custom_op(qualname, mutates_args=(), schema=schema)
    def op(*tensors: Any) -> Any:
        return kernel(*tensors)

    @op.register_fake
    def _(*tensors: Any) -> Any:
        device = tensors[0].device
        made = tuple(torch.empty(t.shape, dtype=getattr(torch, t.dtype), device=device)
                     for t in outputs)
        return made[0] if len(made) == 1 else made

    return op


__all__ = ["register"]
