"""Checks shared by the GPU tests of run-time-size kernels: a range kernel against a
reference at many sizes, on fresh seeded random inputs."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


def rel_l2(out: Any, ref: Any) -> float:
    """The relative L2 error of ``out`` against ``ref`` (torch tensors, in fp32)."""
    import torch

    out, ref = out.float(), ref.float()
    return float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))


def errors_by_size(kernel: Callable[..., Any], b: Any, sizes: Iterable[int], k: int,
                   gen: Any, reference: Callable[[Any, Any], Any]) -> dict[int, float]:
    """The largest relative L2 error of ``kernel(a, b)`` against ``reference(a, b)`` at
    each size, on a fresh seeded ``a`` (``size x k``, ``b``'s dtype) a call."""
    import torch

    errors: dict[int, float] = {}
    for size in sizes:
        a = torch.randn(size, k, device="cuda", dtype=b.dtype, generator=gen)
        c, ref = kernel(a, b), reference(a, b)
        assert c.shape == ref.shape and c.dtype == b.dtype
        errors[size] = max(errors.get(size, 0.0), rel_l2(c, ref))
    return errors
