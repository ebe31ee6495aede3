"""Run the kernels of a size range: ``load(range_artifact)`` returns a :class:`RangeKernel`.

A :class:`~codegen.artifact.RangeArtifact` is what a range workload's tuning gives
(``{"m": {"min": 1, "max": 16384}, ...}``): contiguous buckets of sizes, each served by
one kernel that takes the size at run time. A call reads its size from the input the
artifact names (``size_from``: a GEMM's ``a``, axis 0), finds the size's bucket and
launches that bucket's kernel bound to the size (``KernelArtifact.at_sizes``).

    gemm = load(client.range_artifact(range_id))   # or pipetune.load(...)
    c = gemm(a, b)                                  # any m in the range: a.shape[0]

A range may tie dimensions to its own (``RangeArtifact.tied``): self-attention tuned over
``seq_q = seq_kv`` reads its size from ``q`` and requires ``k``'s sequence axis to be the
same, then binds both lengths (``o, lse = attention(q, k, v)``).

What a call costs: one dictionary lookup for the size, then what a :class:`LoadedKernel`
costs. The range keeps a ``LoadedKernel`` per size it has seen (the most recent
:data:`SIZES_KEPT`), all sizes of a bucket launching one compiled module
(:class:`~workers.kernels.KernelModule`: one NVRTC compile and one ``CUfunction`` per
device, whatever the number of sizes) and sharing the bucket's workspaces per device (a
stream-K kernel's tile counters; their size does not depend on the run-time size, and
launches on one stream are ordered). A size seen for the first time costs its contract's
checks and the packing of its arguments (TMA descriptors encoded for its extents), no
compile once its bucket has run. Nothing on the way synchronises or allocates outside the
caller's framework, so calls are captured by ``torch.cuda.graph`` as a ``LoadedKernel``'s
are; run each bucket once before a capture (its compile and its workspace's zero-fill).
"""

from __future__ import annotations

import bisect
import contextlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from codegen.artifact import RangeArtifact, RangeBucket, WorkspaceArg
from scheduler_search.ops import workload_tensors
from workers.kernels import (
    KernelArgumentError,
    KernelModule,
    LoadedKernel,
    Workspaces,
    bind_arguments,
    expected_tensors,
    plain_artifact,
)

#: Sizes whose bound kernel a range keeps (the least recently called dropped first): a
#: server's batch sizes, with room for the odd ones between.
SIZES_KEPT = 128


def as_range_artifact(artifact: Any) -> RangeArtifact:
    """A RangeArtifact from itself, its dict or its JSON text (bytes too), or an API
    body wrapping it (``{..., "artifact": {...}}``).

    Raises:
        ValueError: not a range artifact, or one whose buckets do not tile a range.
    """
    artifact = plain_artifact(artifact)
    if isinstance(artifact, RangeArtifact):
        return artifact
    if not isinstance(artifact, Mapping):
        raise ValueError("a KernelArtifact, not a RangeArtifact")
    try:
        return RangeArtifact.from_dict(dict(artifact))
    except KeyError as exc:
        raise ValueError(f"not a RangeArtifact: missing field {exc}") from exc


@dataclass(frozen=True)
class RangeTensor:
    """One tensor of a range kernel's contract: its extents grow linearly with the
    range's size (``base + per_size * size`` per axis; a GEMM's ``a``: ``(m, k)``)."""

    name: str
    dtype: str
    role: str
    base: tuple[int, ...]
    per_size: tuple[int, ...]
    dim: str

    def shape_at(self, size: Any) -> tuple[Any, ...]:
        """The tensor's shape at ``size`` (an int, or a symbolic size while tracing)."""
        return tuple(b + p * size if p else b
                     for b, p in zip(self.base, self.per_size, strict=True))

    def describe(self) -> str:
        """``a (m x 128 float16)``, as a range kernel's messages name the tensor."""
        extents = []
        for base, per in zip(self.base, self.per_size, strict=True):
            if not per:
                extents.append(str(base))
            else:
                term = self.dim if per == 1 else f"{per}{self.dim}"
                extents.append(term if not base else f"({term}{base:+d})")
        sep = " x " if any(self.per_size) else "x"
        return f"{self.name} ({sep.join(extents)} {self.dtype})"


class RangeKernel:
    """The kernels of a size range as one callable (see the module docstring); made by
    ``load`` from a RangeArtifact.

    A call takes what the range's kernels take (a GEMM: ``a``, ``b``, optional output
    ``c``; inputs positionally or by name) and returns what they return. Sizes outside the
    range are refused before anything is launched.

    Args:
        artifact: the range's buckets and kernels.
        sizes_kept: how many sizes' bound kernels to keep (least recently called dropped).
    """

    def __init__(self, artifact: RangeArtifact, *, sizes_kept: int = SIZES_KEPT) -> None:
        if sizes_kept < 1:
            raise ValueError(f"sizes_kept must be positive, got {sizes_kept}")
        self.artifact = artifact
        self.dim = artifact.dim
        self.sizes_kept = sizes_kept
        self.expected = _range_tensors(artifact)
        self.size_input, self.size_axis = artifact.size_from
        inputs = [t.name for t in self.expected if t.role == "input"]
        for name in (self.size_input, *(tensor for _, tensor, _ in artifact.tied)):
            if name not in inputs:
                raise ValueError(f"the range reads a size from {name!r}, not an input of "
                                 f"the {artifact.op} contract ({', '.join(inputs)})")
        #: Where the size's tensor is among the positional inputs.
        self._size_position = inputs.index(self.size_input)
        #: Each tied dimension: (dim, tensor, its positional index, axis).
        self._tied = tuple((dim, tensor, inputs.index(tensor), axis)
                           for dim, tensor, axis in artifact.tied)
        self._buckets = artifact.buckets
        self._highs = [b.high for b in self._buckets]
        self._modules = [KernelModule.shared(b.kernel.source, tuple(b.kernel.compile_options))
                         for b in self._buckets]
        self._workspaces = [Workspaces(tuple(a for a in b.kernel.args
                                             if isinstance(a, WorkspaceArg)))
                            for b in self._buckets]
        #: Size -> its bound kernel, the least recently called first.
        self._kernels: OrderedDict[int, LoadedKernel] = OrderedDict()

    @property
    def low(self) -> int:
        return self.artifact.low

    @property
    def high(self) -> int:
        return self.artifact.high

    @property
    def inputs(self) -> list[RangeTensor]:
        return [t for t in self.expected if t.role == "input"]

    @property
    def outputs(self) -> list[RangeTensor]:
        return [t for t in self.expected if t.role == "output"]

    def __repr__(self) -> str:
        a = self.artifact
        buckets = ", ".join(f"{b.low}..{b.high}: {b.kernel.schedule_hash[:12]}"
                            for b in a.buckets)
        return (f"RangeKernel({a.op} {' = '.join(a.dims)} in {self.low}..{self.high}, "
                f"{len(a.buckets)} bucket(s) [{buckets}], tensors "
                f"{', '.join(t.describe() for t in self.expected)}; size from "
                f"{self.size_input}.shape[{self.size_axis}])")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Launch the kernel of the call's size on the given tensors; returns what it
        returns (the output, allocated where not given).

        Raises:
            KernelArgumentError: the size is outside the range, or a tensor does not fit
                the size's kernel (nothing is launched).
        """
        try:
            tensor = (args[self._size_position] if len(args) > self._size_position
                      else kwargs[self.size_input])
            size = tensor.shape[self.size_axis]
        except (IndexError, KeyError, AttributeError, TypeError):
            return self._refuse_call(args, kwargs)
        if self._tied:
            self._check_tied(size, args, kwargs)
        kernel = self._kernels.get(size)
        if kernel is None:
            kernel = self.kernel_for(size)
        else:
            try:  # noqa: SIM105 (a plain try costs nothing; contextlib.suppress a call)
                self._kernels.move_to_end(size)
            except KeyError:  # dropped by another thread since: still good to launch
                pass
        return kernel(*args, **kwargs)

    def kernel_for(self, size: int) -> LoadedKernel:
        """The kernel serving ``size``, bound to it (kept, so the next call of that size
        is a lookup).

        Raises:
            KernelArgumentError: ``size`` is outside the range, or its bucket's kernel
                does not take the size at run time and was tuned for another.
        """
        size = int(size)
        kernel = self._kernels.get(size)
        if kernel is not None:
            return kernel
        index = self._bucket_index(size)
        bucket = self._buckets[index]
        kernel = LoadedKernel(self._bound(bucket, size), module=self._modules[index],
                              workspaces=self._workspaces[index])
        if len(self._kernels) >= self.sizes_kept:
            with contextlib.suppress(KeyError):  # emptied by another thread meanwhile
                self._kernels.popitem(last=False)
        self._kernels[size] = kernel
        return kernel

    def bucket_of(self, size: int) -> RangeBucket:
        """The bucket serving ``size`` (KernelArgumentError outside the range)."""
        return self._buckets[self._bucket_index(size)]

    def covers(self, params: Mapping[str, Any]) -> bool:
        """Whether a workload's ``params`` (exact) fall in this range: its dimension's
        size within the range, each tied dimension equal to it, every other parameter as
        the range has it."""
        size = params.get(self.dim)
        if not isinstance(size, int) or not self.low <= size <= self.high:
            return False
        dims = self.artifact.dims
        if any(params.get(dim) != size for dim in dims[1:]):
            return False
        fixed = self.artifact.params
        return all(value == fixed[name] for name, value in params.items()
                   if name not in dims and name in fixed)

    def _check_tied(self, size: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Each tied dimension's tensor gives ``size`` too (a self-attention range's k has
        as many positions as q), else the call is refused before anything is launched."""
        for dim, tensor, position, axis in self._tied:
            value = args[position] if len(args) > position else kwargs.get(tensor)
            shape = getattr(value, "shape", None)
            if shape is None or len(shape) <= axis:
                continue  # missing or not a tensor: the bound kernel's checks say so
            extent = shape[axis]
            if extent != size:
                raise KernelArgumentError(
                    f"{tensor}.shape[{axis}] = {extent}, {self.size_input}.shape["
                    f"{self.size_axis}] = {size}: this {self.artifact.op} range ties {dim} to "
                    f"{self.dim} (tuned for {self.dim} = {dim}); give both the same length, "
                    f"or tune a range of {dim} alone")

    def _bucket_index(self, size: int) -> int:
        index = bisect.bisect_left(self._highs, size)
        if size < self.low or index == len(self._highs):
            raise KernelArgumentError(
                f"{self.size_input}.shape[{self.size_axis}] = {size}: {self.dim}={size} is "
                f"outside the tuned range {self.low}..{self.high} of this {self.artifact.op} "
                f"kernel; tune a range that holds it (POST /v1/tune)")
        return index

    def _bound(self, bucket: RangeBucket, size: int) -> Any:
        """The bucket's launch contract bound to ``size``."""
        kernel = bucket.kernel
        for dim in self.artifact.dims:
            if dim not in kernel.runtime_dims and kernel.params.get(dim) != size:
                # a kernel specialised to one size
                raise KernelArgumentError(
                    f"{dim}={size}: the kernel of bucket {bucket.low}..{bucket.high} was "
                    f"tuned for {dim}={kernel.params.get(dim)} only")
        sizes = {d: size for d in self.artifact.dims if d in kernel.runtime_dims}
        return kernel.at_sizes(sizes) if sizes else kernel

    def _refuse_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call whose size cannot be read: the binding's error, or the size tensor's."""
        bind_arguments(self.expected, args, kwargs)  # type: ignore[arg-type]  # raises for a missing or unknown tensor
        raise KernelArgumentError(
            f"{self.size_input}: expected a CuPy array or a torch tensor with at least "
            f"{self.size_axis + 1} dimension(s), its axis {self.size_axis} giving "
            f"{self.dim}")


def _range_tensors(artifact: RangeArtifact) -> list[RangeTensor]:
    """The range's tensor contract with each extent as a linear function of the size
    (every tied dimension set to it; read off the operator's contract at sizes 1 and 2,
    checked at the range's top), in the dtypes the first bucket's kernel takes them in."""
    kernel = artifact.buckets[0].kernel
    dtypes = {t.name: t.dtype for t in expected_tensors(kernel)}
    dim = artifact.dim

    def shapes(size: int) -> dict[str, tuple[int, ...]]:
        return {t.name: tuple(t.shape) for t in
                workload_tensors(artifact.op, {**kernel.params, **artifact.sizes_at(size)})}

    one, two, top = shapes(1), shapes(2), shapes(artifact.high)
    tensors = []
    for spec in workload_tensors(artifact.op, {**kernel.params, **artifact.sizes_at(1)}):
        per_size = tuple(b - a for a, b in zip(one[spec.name], two[spec.name], strict=True))
        base = tuple(a - p for a, p in zip(one[spec.name], per_size, strict=True))
        tensor = RangeTensor(spec.name, dtypes[spec.name], spec.role, base, per_size, dim)
        if tensor.shape_at(artifact.high) != top[spec.name]:
            raise ValueError(f"tensor {spec.name!r} of {artifact.op} does not grow linearly "
                             f"with {dim}: no range kernel for it")
        tensors.append(tensor)
    return tensors


__all__ = ["SIZES_KEPT", "RangeKernel", "RangeTensor", "as_range_artifact"]
