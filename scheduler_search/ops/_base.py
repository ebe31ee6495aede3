"""The operator protocol: one pydantic spec class per operator, validated strictly.

Every operator module defines a subclass of :class:`OperatorSpec`. A spec knows its
workload tensors (the tensor contract, :mod:`scheduler_search.ops._contract`: names,
shapes, dtypes, roles and how inputs are drawn, read by code generation, the workers and
``load``), its flop and byte counts, its memory footprint, and how to build its
sTask-graph. The table in ``scheduler_search/ops/__init__.py`` maps operator names to
spec classes.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from scheduler_search.canonical import canonical_json, sha256_hex
from scheduler_search.ops._contract import DTYPE_BYTES, TensorSpec

if TYPE_CHECKING:
    from scheduler_search.hardware import Device
    from scheduler_search.ir import STaskGraph, TileShape

DType = Literal["float16", "bfloat16"]

#: TMA needs every global stride (a row of a row-major tensor) to be a multiple of 16 bytes
#: (CUDA driver API, cuTensorMapEncodeTiled: globalStrides).
TMA_STRIDE_ALIGN_BYTES = 16

#: Largest extent accepted for any single dimension: keeps 32-bit index math in kernels safe.
MAX_DIM = 1 << 20


class SpecError(ValueError):
    """A spec that is well-formed but cannot run here; ``field`` names the culprit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class OperatorSpec(BaseModel):
    """Base of every operator spec.

    Field validation is strict (no coercion of ``"4096"`` to ``4096``; unknown fields are
    errors). Subclasses add the checks that span fields in :meth:`cross_field_errors`;
    every problem found is reported at once, each under its own field's location, so an
    API error names the field exactly as pydantic does for a type error.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    op: ClassVar[str]
    #: Operand streams of the reduction loop: loads that share one pipeline (one stage
    #: count, one pair of full/empty barriers per stage).
    streams: ClassVar[dict[str, tuple[str, ...]]]
    #: Axes whose tile must divide the extent (a tile may not straddle a chunk).
    exact_axes: ClassVar[tuple[str, ...]] = ()
    #: The vendor peer a GPU run compares with (a ``workers.baselines`` name): timed with
    #: the finalists. A peer that cannot run on the worker fails
    #: its measurement; the run goes on without a baseline latency.
    baseline: ClassVar[str | None] = None
    #: Further peers, timed with the finalists only and stored with the run.
    peers: ClassVar[tuple[str, ...]] = ()
    #: Dimensions its generated kernels may take at run time (grid, bounds and TMA
    #: descriptors built for the actual size, tails masked): the ranges a run may tune.
    runtime_dims: ClassVar[tuple[str, ...]] = ()
    #: Fields left out of :meth:`params` (so of the workload key) while at their default:
    #: fields added after specs of the operator were cached, whose keys stay as they were.
    keyed_when_set: ClassVar[tuple[str, ...]] = ()

    def cross_field_errors(self) -> Iterator[tuple[str, str]]:
        """Yield ``(field, message)`` for each constraint between fields that fails."""
        return iter(())

    def _footprint_errors(self) -> Iterator[tuple[str, str]]:
        """Absurd shapes: more memory than the largest known device has, reported under
        the field with the largest value (the likeliest typo)."""
        from scheduler_search.hardware.catalog import CATALOG

        largest = max(CATALOG.values(), key=lambda d: d.memory_bytes)
        need = self.footprint_bytes()
        if need > largest.memory_bytes:
            sizes = {k: v for k, v in self.model_dump().items() if type(v) is int}
            field = max(sizes, key=lambda k: sizes[k])
            yield (
                field,
                (
                    f"workload needs {need / 2**30:.1f} GiB of device memory; the largest known "
                    f"device ({largest.name}) has {largest.memory_bytes / 2**30:.1f} GiB"
                ),
            )

    @model_validator(mode="after")
    def _check_cross_fields(self) -> OperatorSpec:
        problems = list(self.cross_field_errors())
        if not problems:
            problems = list(self._footprint_errors())
        errors = [
            InitErrorDetails(
                type=PydanticCustomError("spec_constraint", message),
                loc=(field,),
                input=getattr(self, field),
            )
            for field, message in problems
        ]
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    @abstractmethod
    def tensors(self) -> list[TensorSpec]:
        """Workload tensors in argument order (inputs, then outputs): the operator's tensor
        contract, the one source that code generation, the workers and ``load`` read."""

    @abstractmethod
    def flops(self) -> float:
        """Useful floating-point operations (2 per multiply-add; masked work excluded)."""

    @abstractmethod
    def build_graph(self, tile: TileShape) -> STaskGraph:
        """The sTask-graph of one output tile of shape ``tile``."""

    def graph(self, tile: TileShape) -> STaskGraph:
        """:meth:`build_graph`, memoised: the space asks for the same tiles many times."""
        return _cached_graph(self, tuple(sorted(tile.items())))

    def grid_sharing(self, tile: TileShape | None = None) -> dict[str, dict[str, int]]:
        """Input tensors shared by neighbouring instances of a grid axis, for ``tile``:
        tensor -> {grid axis: how many consecutive instances read the same slice} (GQA
        heads)."""
        return {}

    def stream_loads(self) -> dict[str, tuple[str, ...]]:
        """This workload's operand streams and the load sTasks of each (default: the
        operator's ``streams``; a spec field that changes what a stream carries overrides
        it, keeping the stream's name and so its ``stages_`` knob)."""
        return dict(type(self).streams)

    def loop_orders(self, offered: tuple[str, ...]) -> tuple[str, ...]:
        """The loop orders (``order`` knob) this workload's graph can take of those its
        operator's rows ``offered`` (default: all)."""
        return offered

    def min_bytes(self) -> int:
        """Compulsory global-memory traffic: every tensor read or written once."""
        return sum(t.size_bytes for t in self.tensors())

    def footprint_bytes(self) -> int:
        """Device memory the workload tensors occupy."""
        return self.min_bytes()

    def params(self) -> dict[str, Any]:
        """The spec's fields as a plain dict (the API's ``params``), without the
        :attr:`keyed_when_set` fields that hold their default."""
        values = self.model_dump()
        for name in self.keyed_when_set:
            if getattr(self, name) == type(self).model_fields[name].default:
                del values[name]
        return values

    def run_baseline(self) -> str | None:
        """The peer a GPU run of this spec compares with (default: :attr:`baseline`)."""
        return self.baseline

    def run_peers(self) -> tuple[str, ...]:
        """The further peers a GPU run of this spec times (default: :attr:`peers`)."""
        return self.peers

    def canonical_json(self) -> str:
        """Canonical JSON of op and params: sorted keys, no whitespace."""
        return canonical_json({"op": self.op, "params": self.params()})

    def workload_key(self) -> str:
        """sha256 of the canonical JSON: equal specs give equal keys whatever the field order."""
        return sha256_hex(self.canonical_json())

    def check_fits(self, device: Device) -> None:
        """Raise :class:`SpecError` when the workload cannot be held by ``device``, or its
        8-bit float inputs cannot be multiplied there."""
        dtype = self.params().get("dtype", "")
        if str(dtype).startswith("float8") and not device.capabilities.fp8_mma:
            raise SpecError(
                "dtype",
                f"{dtype} needs tensor cores that multiply 8-bit floats (sm_89, sm_90); "
                f"{device.name} ({device.arch}) has none",
            )
        need = self.footprint_bytes()
        if need > device.memory_bytes:
            raise SpecError(
                "params",
                f"workload needs {need / 2**30:.1f} GiB but {device.name} has "
                f"{device.memory_bytes / 2**30:.1f} GiB of memory",
            )


@lru_cache(maxsize=4096)
def _cached_graph(spec: OperatorSpec, tile: tuple[tuple[str, int], ...]) -> STaskGraph:
    return spec.build_graph(dict(tile))


def row_alignment_error(field: str, elements: int, dtype: str) -> str | None:
    """Message when a TMA-loaded row of ``elements`` is not a multiple of 16 bytes."""
    row_bytes = elements * DTYPE_BYTES[dtype]
    if row_bytes % TMA_STRIDE_ALIGN_BYTES == 0:
        return None
    multiple = TMA_STRIDE_ALIGN_BYTES // DTYPE_BYTES[dtype]
    return (
        f"{field}={elements} gives {row_bytes}-byte rows; TMA needs rows that are a multiple "
        f"of {TMA_STRIDE_ALIGN_BYTES} bytes ({field} a multiple of {multiple} for {dtype})"
    )
