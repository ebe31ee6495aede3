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

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

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
    compile_options: tuple[str, ...] = ("-std=c++17", "-arch=sm_90a")
    cluster: tuple[int, int, int] = (1, 1, 1)
    version: int = ARTIFACT_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (lists instead of tuples) suitable for JSON."""
        return json.loads(json.dumps(asdict(self)))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @property
    def hash(self) -> str:
        """sha256 of the canonical JSON: the kernel's identity (``/v1/kernels/{hash}``)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()

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
