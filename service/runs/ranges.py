"""Tuned ranges in the service: a range workload's identity, a table's RangeArtifact, and an
exact size answered from the table whose range holds it.

A range workload (``{"m": {"min": 1, "max": 16384}, "n": 4096, ...}``) is stored as a
workload row like an exact one, its params the fixed parameters as the operator spec
writes them (defaults filled in, so two spellings of one workload share a run) with the
range as given; its key is the sha256 of that canonical JSON marked ``range``, so it never
meets an exact workload's. Its tables are found by ``fixed_key``, the sha256 of the
operator and the fixed parameters alone: the same for the range workload and for every
exact workload inside it. A table over tied dimensions (self-attention's seq_q = seq_kv)
leaves all of them out of its fixed parameters and holds an exact workload only where
they are equal.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from codegen.artifact import KernelArtifact, RangeArtifact, RangeBucket
from scheduler_search.canonical import canonical_sha256
from scheduler_search.ops import OperatorSpec, RangeSpec, parse_range_spec, runtime_dims
from service.core.db import Database
from service.db import ranges as ranges_repo
from service.db import repositories as repo
from service.db import results as results_repo
from service.db.models import RangeTableModel


def _canonical_sha(data: Mapping[str, Any]) -> str:
    return canonical_sha256(data)


def fixed_params(range_spec: RangeSpec) -> dict[str, Any]:
    """The fixed parameters as the operator spec writes them (defaults filled in, those
    keyed only when set left out): the exact spec's at the range's low corner, without the
    range dimensions."""
    low = {name: r.low for name, r in range_spec.ranges.items()}
    return {k: v for k, v in range_spec.exact(low).params().items()
            if k not in range_spec.ranges}


def fixed_key(op: str, fixed: Mapping[str, Any]) -> str:
    """The lookup key of a range's tables: the operator and its fixed parameters."""
    return _canonical_sha({"op": op, "params": dict(fixed)})


def range_workload(range_spec: RangeSpec) -> tuple[str, dict[str, Any]]:
    """The workload row of a range request: its key and params (the fixed parameters
    normalised, the range as given)."""
    params = {**fixed_params(range_spec),
              **{name: r.to_json() for name, r in range_spec.ranges.items()}}
    return _canonical_sha({"op": range_spec.op, "params": params, "kind": "range"}), params


def interpolated_us(latencies: Mapping[Any, float], size: int) -> float | None:
    """A latency at ``size`` from those measured at other sizes (``{size: us}``, keys as
    text or numbers): exact where measured, else log-log between the nearest sizes on
    either side, else the nearest one's."""
    points = sorted((int(k), float(v)) for k, v in latencies.items() if v)
    if not points:
        return None
    sizes = [p[0] for p in points]
    index = bisect.bisect_left(sizes, size)
    if index < len(points) and sizes[index] == size:
        return points[index][1]
    if index == 0 or index == len(points):
        return points[min(index, len(points) - 1)][1]
    (x0, y0), (x1, y1) = points[index - 1], points[index]
    t = (math.log(size) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return math.exp(math.log(y0) + t * (math.log(y1) - math.log(y0)))


def bucket_of(table: RangeTableModel, size: int) -> dict[str, Any]:
    """The bucket of ``table`` serving ``size``.

    Raises:
        KeyError: ``size`` is outside the table's range.
    """
    for bucket in table.buckets:
        if bucket["low"] <= size <= bucket["high"]:
            return bucket
    raise KeyError(f"{table.dim}={size} is outside {table.low}..{table.high}")


def range_artifact(session: Any, table: RangeTableModel) -> RangeArtifact | None:
    """The table's RangeArtifact (each bucket's kernel from the kernels table; the tied
    dimensions, and where a call reads each, from the table's params), or None where a
    bucket has no kernel (an operator without code generation)."""
    buckets = []
    for bucket in table.buckets:
        kernel_hash = bucket.get("kernel_hash")
        row = repo.get_kernel(session, kernel_hash=kernel_hash) if kernel_hash else None
        if row is None:
            return None
        buckets.append(RangeBucket(int(bucket["low"]), int(bucket["high"]),
                                   KernelArtifact.from_dict(row.artifact),
                                   float(bucket.get("loss") or 1.0)))
    return RangeArtifact(op=table.op, params=dict(table.params), dim=table.dim,
                         size_from=(str(table.size_from[0]), int(table.size_from[1])),
                         buckets=tuple(buckets), sampled=tuple(int(s) for s in table.sizes),
                         tied=_tied(table))


def _tied(table: RangeTableModel) -> tuple[tuple[str, str, int], ...]:
    """The dimensions tied to the table's ``dim``, each with its tensor and axis (none for
    a range of one dimension: a GEMM's artifact is as before)."""
    from scheduler_search.search.range_search import tied_sources

    ranged = [name for name, value in table.params.items() if name != table.dim
              and name in runtime_dims(table.op) and not isinstance(value, int)]
    if not ranged:
        return ()
    return tied_sources(parse_range_spec(table.op, table.params))


@dataclass(frozen=True)
class RangeServed:
    """An exact workload answered from a tuned range: the table, the bucket whose kernel
    serves the size, that kernel bound to the size (stored; None without code generation)
    and a latency interpolated from the bucket's kernel's measured ones."""

    table: RangeTableModel
    bucket: dict[str, Any]
    spec: OperatorSpec
    dim: str
    kernel_hash: str | None
    latency_us: float | None
    #: Every dimension the size was bound to (``dim`` first; several when tied).
    dims: tuple[str, ...] = ()


def range_axes(op: str) -> list[tuple[str, ...]]:
    """The range axes a table of ``op`` may be over, as its lookups try them: all of the
    operator's run-time dimensions tied (where it has several: self-attention), then
    each alone."""
    dims = runtime_dims(op)
    return ([dims] if len(dims) > 1 else []) + [(dim,) for dim in dims]


def covering_table(session: Any, spec: OperatorSpec, device_key: str
                   ) -> tuple[tuple[str, ...], RangeTableModel] | None:
    """The newest table on the device whose range holds ``spec``'s size, and the
    dimensions of its axis, the primary first (None: none does). A tied axis holds
    ``spec`` only where its dimensions are equal (seq_q = seq_kv)."""
    params = spec.params()
    for axis in range_axes(spec.op):
        sizes = {params.get(dim) for dim in axis}
        size = sizes.pop() if len(sizes) == 1 else None
        if not isinstance(size, int):
            continue
        fixed = {k: v for k, v in params.items() if k not in axis}
        table = ranges_repo.find_covering(session, op=spec.op, fixed_key=fixed_key(spec.op,
                                          fixed), dim=axis[0], low=size, high=size,
                                          device_key=device_key)
        if table is not None:
            return axis, table
    return None


def serve_exact(db: Database, spec: OperatorSpec, device_key: str) -> RangeServed | None:
    """``spec`` answered from the range table that holds its size on the device: the
    bucket's kernel bound to the size (``KernelArtifact.at_sizes``, every dimension of
    the axis; stored in the kernels table so that its hash resolves), or None where no
    table holds it."""
    with repo.session_scope(db.read_sessions) as session:
        found = covering_table(session, spec, device_key)
        if found is None:
            return None
        dims, table = found
        dim = dims[0]
        size = int(spec.params()[dim])
        bucket = bucket_of(table, size)
        kernel_row = (repo.get_kernel(session, kernel_hash=bucket["kernel_hash"])
                      if bucket.get("kernel_hash") else None)
        artifact = dict(kernel_row.artifact) if kernel_row is not None else None
    kernel_hash = None
    if artifact is not None:
        bound = KernelArtifact.from_dict(artifact).at_sizes(dict.fromkeys(dims, size))
        kernel_hash = bound.hash
        with repo.session_scope(db.sessions) as session:
            results_repo.store_kernel(session, kernel_hash=kernel_hash,
                                      schedule_hash=bound.schedule_hash,
                                      artifact=bound.to_dict())
    latency = interpolated_us(bucket.get("latencies_us") or {}, size)
    return RangeServed(table, bucket, spec, dim, kernel_hash, latency, dims)


__all__ = [
    "RangeServed",
    "bucket_of",
    "covering_table",
    "fixed_key",
    "fixed_params",
    "interpolated_us",
    "range_artifact",
    "range_axes",
    "range_workload",
    "serve_exact",
]
