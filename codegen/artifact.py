"""KernelArtifact: the launch contract of one generated kernel, as plain JSON-able data.

A KernelArtifact is everything needed to compile and launch a kernel with CuPy alone:
the CUDA C++ source, its entry point, grid / block / dynamic shared memory, the argument
list in launch order (tensors by name, scalars, TMA tensor maps), and compile options.
It is produced by ``codegen`` and consumed by ``workers`` and by users of the API, so it
holds no live objects and imports nothing beyond the standard library.

The tensors an argument names are the operator's tensor contract: names, shapes, dtypes
and roles in argument order come from one place, the operator spec's ``tensors()``
(``scheduler_search/ops``). ``codegen.pipeline.lower`` builds the argument list from it;
the workers (``workers.contract``) and ``load`` check an artifact's arguments against it.
"""

from __future__ import annotations

import bisect
import itertools
import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from codegen.targets import HOPPER
from scheduler_search.canonical import canonical_json, sha256_hex

ARTIFACT_VERSION = 1

ArgKind = Literal["tensor", "scalar", "tensor_map", "workspace"]
TensorRole = Literal["input", "output"]
Swizzle = Literal["none", "32B", "64B", "128B"]


@dataclass(frozen=True)
class TensorArg:
    """A device pointer to a workload tensor, passed as ``T*`` in launch order."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    role: TensorRole
    kind: ArgKind = "tensor"


@dataclass(frozen=True)
class ScalarArg:
    """A by-value scalar argument (``int32``, ``int64`` or ``float32``)."""

    name: str
    dtype: Literal["int32", "int64", "float32"]
    value: float | int
    kind: ArgKind = "scalar"


@dataclass(frozen=True)
class TensorMapArg:
    """A TMA descriptor (``const __grid_constant__ CUtensorMap``) over a workload tensor.

    Dimensions and strides are listed innermost first, as ``cuTensorMapEncodeTiled``
    takes them; ``global_strides_bytes`` has one entry fewer than ``global_dims``.
    """

    name: str
    tensor: str
    dtype: str
    global_dims: tuple[int, ...]
    global_strides_bytes: tuple[int, ...]
    box_dims: tuple[int, ...]
    swizzle: Swizzle = "128B"
    element_strides: tuple[int, ...] | None = None
    oob_fill: Literal["zero", "nan"] = "zero"
    kind: ArgKind = "tensor_map"


@dataclass(frozen=True)
class WorkspaceArg:
    """Scratch global memory the kernel keeps across launches, passed as a pointer in
    launch order: ``bytes`` bytes, zero-filled once when allocated. The kernel leaves it
    as it found it where that matters (stream-K's tile counters are back at zero when it
    exits), so one allocation serves every later launch on one stream; two launches that
    may overlap (two streams) need one each, as a cuBLAS workspace does."""

    name: str
    bytes: int
    kind: ArgKind = "workspace"


KernelArg = TensorArg | ScalarArg | TensorMapArg | WorkspaceArg

#: The CUDA driver's names of a TensorMapArg's values (``cuTensorMapEncodeTiled``'s enums),
#: for the workers' encoder and the standalone export.
TENSOR_MAP_DATA_TYPES = {
    "float16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
    "bfloat16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
    "float32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32",
    # TMA moves bytes: 8-bit floats as unsigned bytes.
    "float8_e4m3": "CU_TENSOR_MAP_DATA_TYPE_UINT8",
    "float8_e5m2": "CU_TENSOR_MAP_DATA_TYPE_UINT8",
}
TENSOR_MAP_SWIZZLES = {
    "none": "CU_TENSOR_MAP_SWIZZLE_NONE",
    "32B": "CU_TENSOR_MAP_SWIZZLE_32B",
    "64B": "CU_TENSOR_MAP_SWIZZLE_64B",
    "128B": "CU_TENSOR_MAP_SWIZZLE_128B",
}
TENSOR_MAP_OOB_FILLS = {
    "zero": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE",
    "nan": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA",
}


@dataclass(frozen=True)
class KernelArtifact:
    """One compiled-and-launchable kernel: source plus its launch contract."""

    op: str
    params: dict[str, Any]
    schedule_hash: str
    source: str
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem_bytes: int
    args: tuple[KernelArg, ...]
    compile_options: tuple[str, ...] = HOPPER.compile_options
    cluster: tuple[int, int, int] = (1, 1, 1)
    version: int = ARTIFACT_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (lists instead of tuples) suitable for JSON."""
        return json.loads(json.dumps(asdict(self)))

    def to_json(self) -> str:
        return canonical_json(self.to_dict())

    @property
    def hash(self) -> str:
        """sha256 of the canonical JSON: the kernel's identity (``/v1/kernels/{hash}``)."""
        return sha256_hex(self.to_json())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KernelArtifact:
        """Inverse of :meth:`to_dict`; rejects artifacts of another version."""
        if data.get("version", ARTIFACT_VERSION) != ARTIFACT_VERSION:
            raise ValueError(
                f"KernelArtifact version {data.get('version')} is not {ARTIFACT_VERSION}"
            )
        args = tuple(_arg_from_dict(a) for a in data["args"])
        return cls(
            op=data["op"],
            params=dict(data["params"]),
            schedule_hash=data["schedule_hash"],
            source=data["source"],
            entry=data["entry"],
            grid=tuple(data["grid"]),
            block=tuple(data["block"]),
            dynamic_smem_bytes=int(data["dynamic_smem_bytes"]),
            args=args,
            compile_options=tuple(data.get("compile_options", ())),
            cluster=tuple(data.get("cluster", (1, 1, 1))),
            version=data.get("version", ARTIFACT_VERSION),
            extra=dict(data.get("extra", {})),
        )

    @classmethod
    def from_json(cls, text: str) -> KernelArtifact:
        return cls.from_dict(json.loads(text))

    # ----- run-time sizes ------------------------------------------------------------
    @property
    def size_slots(self) -> tuple[SizeSlot, ...]:
        """Where the kernel's run-time sizes appear in its launch contract (empty for a
        kernel specialised to one shape)."""
        return tuple(SizeSlot(**slot) for slot in self.extra.get("size_slots", ()))

    @property
    def runtime_dims(self) -> tuple[str, ...]:
        """The workload dimensions the kernel takes at run time (``("m",)``)."""
        return tuple(dict.fromkeys(slot.dim for slot in self.size_slots))

    def at_sizes(self, sizes: dict[str, int]) -> KernelArtifact:
        """This kernel's launch contract for another size of its run-time dimensions: the
        same source, entry, grid and block (one compiled module serves every size), with
        the sized arguments (the size scalars, tensor shapes, TMA descriptors' extents)
        and ``params`` set for ``sizes``.

        Raises:
            ValueError: ``sizes`` names a dimension the kernel does not take at run time.
        """
        unknown = set(sizes) - set(self.runtime_dims)
        if unknown:
            raise ValueError(f"the kernel takes {sorted(self.runtime_dims) or 'no size'} at run "
                             f"time, not {sorted(unknown)}")
        args = list(self.args)
        by_name = {arg.name: i for i, arg in enumerate(args)}
        for slot in self.size_slots:
            if slot.dim in sizes:
                i = by_name[slot.arg]
                args[i] = slot.bind(args[i], int(sizes[slot.dim]))
        params = {**self.params, **{dim: int(size) for dim, size in sizes.items()}}
        return replace(self, params=params, args=tuple(args))


@dataclass(frozen=True)
class SizeSlot:
    """One place of a run-time size in a launch contract: argument ``arg``'s ``field``
    (``value`` of a scalar, an entry of a tensor's ``shape`` or of a tensor map's
    ``global_dims`` or ``global_strides_bytes``) holds ``scale`` times dimension ``dim``."""

    dim: str
    arg: str
    field: Literal["value", "shape", "global_dims", "global_strides_bytes"]
    index: int = 0
    scale: int = 1

    def bind(self, arg: KernelArg, size: int) -> KernelArg:
        """``arg`` with this slot set for ``size``."""
        value = self.scale * size
        if self.field == "value":
            return replace(arg, value=value)
        entries = list(getattr(arg, self.field))
        entries[self.index] = value
        return replace(arg, **{self.field: tuple(entries)})


def _arg_from_dict(data: dict[str, Any]) -> KernelArg:
    kind = data.get("kind")
    if kind == "tensor":
        return TensorArg(
            name=data["name"], dtype=data["dtype"], shape=tuple(data["shape"]), role=data["role"]
        )
    if kind == "scalar":
        return ScalarArg(name=data["name"], dtype=data["dtype"], value=data["value"])
    if kind == "workspace":
        return WorkspaceArg(name=data["name"], bytes=int(data["bytes"]))
    if kind == "tensor_map":
        strides = data.get("element_strides")
        return TensorMapArg(
            name=data["name"],
            tensor=data["tensor"],
            dtype=data["dtype"],
            global_dims=tuple(data["global_dims"]),
            global_strides_bytes=tuple(data["global_strides_bytes"]),
            box_dims=tuple(data["box_dims"]),
            swizzle=data.get("swizzle", "128B"),
            element_strides=tuple(strides) if strides is not None else None,
            oob_fill=data.get("oob_fill", "zero"),
        )
    raise ValueError(f"unknown kernel argument kind {kind!r}")


@dataclass(frozen=True)
class RangeBucket:
    """Sizes ``low``..``high`` of a range served by ``kernel``, which takes the range's
    dimension at run time; it ran at ``loss`` times the best kernel measured at the
    bucket's sampled sizes (geometric mean; 1.0 where it was the best at each)."""

    low: int
    high: int
    kernel: KernelArtifact
    loss: float = 1.0


@dataclass(frozen=True)
class RangeArtifact:
    """The kernels of a range workload: contiguous buckets over dimension ``dim``, each
    served by one compiled kernel. A call reads its size from input ``size_from[0]``'s
    axis ``size_from[1]``, finds its bucket and launches that kernel bound to the size
    (:meth:`KernelArtifact.at_sizes`).

    ``tied`` lists the dimensions that take ``dim``'s size on every call (self-attention:
    ``seq_kv`` tied to ``seq_q``), each with the input and axis a call gives it in
    (``("seq_kv", "k", 1)``): a call's tensors must agree, and every size binds them all.
    """

    op: str
    #: The workload as the request gave it: the range dimension as ``{"min", "max"}`` or
    #: a list of sizes.
    params: dict[str, Any]
    dim: str
    size_from: tuple[str, int]
    buckets: tuple[RangeBucket, ...]
    #: The sizes the range run measured its candidates at (where the buckets are cut).
    sampled: tuple[int, ...] = ()
    version: int = ARTIFACT_VERSION
    kind: Literal["range"] = "range"
    #: ``(dim, tensor, axis)`` of each dimension tied to ``dim`` (none: one dimension).
    tied: tuple[tuple[str, str, int], ...] = ()

    @property
    def dims(self) -> tuple[str, ...]:
        """Every dimension a size sets: ``dim``, then the tied ones."""
        return (self.dim, *(name for name, _, _ in self.tied))

    def sizes_at(self, size: int) -> dict[str, int]:
        """Every dimension of the range at ``size`` (what a bucket's kernel is bound to)."""
        return dict.fromkeys(self.dims, size)

    @property
    def low(self) -> int:
        return self.buckets[0].low

    @property
    def high(self) -> int:
        return self.buckets[-1].high

    def bucket_of(self, size: int) -> RangeBucket:
        """The bucket serving ``size``.

        Raises:
            KeyError: ``size`` is outside ``low..high``.
        """
        index = bisect.bisect_left([b.high for b in self.buckets], size)
        if size < self.low or index == len(self.buckets):
            raise KeyError(f"{self.dim}={size} is outside the tuned range {self.low}..{self.high}")
        return self.buckets[index]

    def kernel_at(self, size: int) -> KernelArtifact:
        """The launch contract of the kernel serving ``size``, bound to it."""
        return self.bucket_of(size).kernel.at_sizes(self.sizes_at(size))

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON; ``tied`` only where there are tied dimensions (a range of
        one dimension keeps the JSON, and so the hash, it had before ties existed)."""
        data = {
            "kind": self.kind, "version": self.version, "op": self.op,
            "params": json.loads(json.dumps(self.params)), "dim": self.dim,
            "size_from": list(self.size_from), "sampled": list(self.sampled),
            "buckets": [{"low": b.low, "high": b.high, "loss": b.loss,
                         "kernel": b.kernel.to_dict()} for b in self.buckets],
        }
        if self.tied:
            data["tied"] = [list(entry) for entry in self.tied]
        return data

    def to_json(self) -> str:
        return canonical_json(self.to_dict())

    @property
    def hash(self) -> str:
        return sha256_hex(self.to_json())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RangeArtifact:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: not a range artifact of this version, or buckets that do not tile
                a range in order.
        """
        if data.get("kind") != "range":
            raise ValueError("not a range artifact (kind is not 'range')")
        if data.get("version", ARTIFACT_VERSION) != ARTIFACT_VERSION:
            raise ValueError(f"RangeArtifact version {data.get('version')} is not "
                             f"{ARTIFACT_VERSION}")
        buckets = tuple(RangeBucket(int(b["low"]), int(b["high"]),
                                    KernelArtifact.from_dict(b["kernel"]),
                                    float(b.get("loss", 1.0))) for b in data["buckets"])
        if not buckets or any(b.low > b.high for b in buckets) or any(
                nxt.low != cur.high + 1 for cur, nxt in itertools.pairwise(buckets)):
            raise ValueError("range buckets must be non-empty, ordered and contiguous")
        size_from = data["size_from"]
        tied = tuple((str(name), str(tensor), int(axis))
                     for name, tensor, axis in data.get("tied", ()))
        return cls(op=data["op"], params=dict(data["params"]), dim=data["dim"],
                   size_from=(str(size_from[0]), int(size_from[1])), buckets=buckets,
                   sampled=tuple(int(s) for s in data.get("sampled", ())), tied=tied)

    @classmethod
    def from_json(cls, text: str) -> RangeArtifact:
        return cls.from_dict(json.loads(text))
