"""Specs over a range of sizes: one tuning run for every size a dimension takes.

In LLM serving the token count ``m`` of a GEMM changes with every batch, and attention's
sequence lengths with every request. A *range spec* gives such a dimension as a range,
``{"min": 1, "max": 16384}``, or as a list of the sizes it takes, ``[1, 7, 64, 300]``,
and every other parameter as one value, as an exact spec does:

    {"m": {"min": 1, "max": 16384}, "n": 4096, "k": 4096, "dtype": "float16"}

Only the dimensions an operator's kernels can take at run time may be ranges
(the spec's ``runtime_dims``). A range spec is validated as strictly as an exact one: the range
itself (``min <= max``, within the dimension's bounds), and the exact spec at both ends
of the range axis (its smallest and its largest size): the operators' other checks grow
with a dimension (memory footprint) or do not involve it, so the ends stand for every
size between. Errors name the field (``m.min``, ``seq_kv``).

A run tunes one range *axis*. Attention may give ``seq_q`` alone, ``seq_kv`` alone, or
both with the same range (or the same list): self-attention's prefill, where
``seq_q = seq_kv`` for every call, so both are *tied* to the one axis and every size of
it sets both (:attr:`RangeSpec.dims`, :meth:`RangeSpec.at`). Both given different ranges
would be a grid of sizes, not an axis, and is refused naming ``seq_kv``.

:meth:`RangeSpec.sample` draws the sizes a search measures a candidate at: log-uniform
over the range (users' sizes spread over orders of magnitude: 1, 7, 64, 300, 4096), the
endpoints always included.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from scheduler_search.ops._base import MAX_DIM, OperatorSpec, SpecError
from scheduler_search.ops.registry import runtime_dims

#: The golden ratio's fractional part: steps of it around the unit interval leave no
#: large gap at any prefix length (a low-discrepancy sequence).
_GOLDEN_FRACTION = (math.sqrt(5.0) - 1.0) / 2.0

#: Most sizes a list may give (a longer one is a range).
MAX_LISTED_SIZES = 256


@dataclass(frozen=True)
class SizeRange:
    """The sizes one dimension takes: every integer in ``[low, high]``, or only
    ``listed`` (sorted, distinct; ``low`` and ``high`` are then its ends)."""

    low: int
    high: int
    listed: tuple[int, ...] | None = None

    def __contains__(self, size: object) -> bool:
        if not isinstance(size, int) or isinstance(size, bool):
            return False
        if self.listed is not None:
            return size in self.listed
        return self.low <= size <= self.high

    def to_json(self) -> dict[str, int] | list[int]:
        """As a request gives it: ``{"min", "max"}`` or the list."""
        return list(self.listed) if self.listed is not None else {"min": self.low,
                                                                    "max": self.high}

    def sample(self, count: int, rng: random.Random) -> list[int]:
        """Up to ``count`` distinct sizes, sorted: both ends, then log-uniform points of a
        golden-ratio sequence from a random start (each prefix spread evenly over the log
        range, so a larger count keeps a smaller one's sizes; independent draws had left
        143..1564 of 1..16384 without a size, and the buckets there unserved). For a list:
        its sizes drawn so in log space, the nearest listed size taken."""
        if self.listed is not None and len(self.listed) <= count:
            return list(self.listed)
        if self.listed is None and self.high - self.low + 1 <= count:
            return list(range(self.low, self.high + 1))
        chosen = {self.low, self.high}
        log_low, log_high = math.log(self.low), math.log(self.high)
        point = rng.random()
        for _ in range(64 * count):
            if len(chosen) >= count:
                break
            point = (point + _GOLDEN_FRACTION) % 1.0
            chosen.add(self._nearest(math.exp(log_low + point * (log_high - log_low))))
        return sorted(chosen)

    def _nearest(self, size: float) -> int:
        if self.listed is None:
            return min(self.high, max(self.low, round(size)))
        return min(self.listed, key=lambda s: (abs(math.log(s) - math.log(size)), s))


@dataclass(frozen=True)
class RangeSpec:
    """An operator's params with one range axis: one dimension given as a
    :class:`SizeRange`, or several *tied* to it (the same range each, every size setting
    all of them: self-attention's ``seq_q = seq_kv``)."""

    op: str
    #: Every parameter that is one value, as the request gives it.
    fixed: Mapping[str, Any]
    ranges: Mapping[str, SizeRange]

    @property
    def dims(self) -> tuple[str, ...]:
        """The range dimensions in the operator's ``runtime_dims`` order, the primary
        (where a bucket table's sizes are named) first; several only when tied."""
        order = runtime_dims(self.op)
        return tuple(sorted(self.ranges, key=lambda n: (order.index(n) if n in order
                                                        else len(order), n)))

    @property
    def dim(self) -> str:
        """The primary range dimension (a GEMM's ``m``; attention's ``seq_q`` when tied)."""
        return self.dims[0]

    @property
    def axis(self) -> SizeRange:
        """The sizes of the range axis (the primary dimension's range)."""
        return self.ranges[self.dim]

    def at(self, size: int) -> dict[str, int]:
        """Every range dimension at ``size`` (``{"seq_q": s, "seq_kv": s}`` when tied)."""
        return dict.fromkeys(self.dims, size)

    def exact(self, sizes: Mapping[str, int]) -> OperatorSpec:
        """The exact spec at ``sizes`` (one size per range dimension, each in range, tied
        dimensions equal).

        Raises:
            SpecError: a dimension is missing, unknown, outside its range, or a tied one
                differs from the primary.
        """
        from scheduler_search.ops import parse_spec

        if set(sizes) != set(self.ranges):
            raise SpecError(next(iter(set(sizes) ^ set(self.ranges))),
                            f"sizes must give exactly {', '.join(sorted(self.ranges))}")
        for name, size in sizes.items():
            if size not in self.ranges[name]:
                raise SpecError(name, f"{size} is outside {self.ranges[name].to_json()}")
        for name in self.dims[1:]:
            if sizes[name] != sizes[self.dim]:
                raise SpecError(name, f"{name}={sizes[name]} differs from {self.dim}="
                                      f"{sizes[self.dim]}; the two are tied to one range")
        return parse_spec(self.op, {**self.fixed, **sizes})

    def contains(self, params: Mapping[str, Any]) -> bool:
        """Whether exact ``params`` are one of this spec's workloads: the same fixed
        parameters, the range axis's size in its range, tied dimensions equal to it."""
        if set(params) != set(self.fixed) | set(self.ranges):
            return False
        size = params[self.dim]
        return (all(params[k] == v for k, v in self.fixed.items())
                and all(params[name] in r for name, r in self.ranges.items())
                and all(params[name] == size for name in self.dims[1:]))

    def corners(self) -> Iterator[dict[str, int]]:
        """The range axis at its smallest and at its largest size."""
        for size in sorted({self.axis.low, self.axis.high}):
            yield self.at(size)

    def sample(self, count: int, seed: int = 0) -> list[dict[str, int]]:
        """Sizes to measure at: ``count`` sizes of the range axis (log-uniform, the ends
        included, seeded), each setting every tied dimension."""
        return [self.at(size) for size in self.axis.sample(count, random.Random(seed))]

    def params(self) -> dict[str, Any]:
        """The request's params: the fixed ones and each range as given (the range
        workload's identity)."""
        return {**self.fixed, **{name: r.to_json() for name, r in self.ranges.items()}}


def is_range_value(value: object, *, range_dim: bool = False) -> bool:
    """Whether a parameter's value is meant as a range or a list of sizes: any object or
    list for a dimension that can be one (``range_dim``: a malformed range is then refused
    naming it), else a list or an object of ``min`` / ``max`` only (another object is a
    nested model's value, a GEMM's ``epilogue``)."""
    if isinstance(value, list) or (range_dim and isinstance(value, dict)):
        return True
    return isinstance(value, dict) and bool(value) and set(value) <= {"min", "max"}


def is_range_params(params: Mapping[str, Any]) -> bool:
    """Whether any parameter is given as a range or a list of sizes."""
    return any(is_range_value(v) for v in params.values())


def parse_range_spec(op: str, params: Mapping[str, Any]) -> RangeSpec:
    """Validate ``params`` with ranges for operator ``op``.

    Raises:
        SpecError: a range is malformed, on a dimension that cannot be one, or the exact
            spec at one of its corners is invalid; ``field`` names the parameter (``m``,
            ``m.min``).
    """
    from scheduler_search.ops.registry import OPERATORS

    if op not in OPERATORS:
        raise SpecError("op", f"unknown operator {op!r}; known: {', '.join(sorted(OPERATORS))}")
    allowed = runtime_dims(op)
    ranges: dict[str, SizeRange] = {}
    fixed: dict[str, Any] = {}
    for name, value in params.items():
        if not is_range_value(value, range_dim=name in allowed):
            fixed[name] = value
        elif name not in allowed:
            dims = ", ".join(allowed) if allowed else "none"
            raise SpecError(name, f"{op} cannot take {name} as a range (dimensions that can: "
                                  f"{dims})")
        else:
            ranges[name] = _size_range(name, value)
    if not ranges:
        raise SpecError(allowed[0] if allowed else "op", "no dimension is given as a range")
    spec = RangeSpec(op, fixed, ranges)
    _check_tied(spec)
    for corner in spec.corners():
        try:
            spec.exact(corner)
        except ValidationError as error:
            first = error.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or next(iter(corner))
            at = ", ".join(f"{k}={v}" for k, v in corner.items())
            raise SpecError(field, f"{first['msg']} (at {at})") from error
    return spec


def _check_tied(spec: RangeSpec) -> None:
    """Several range dimensions are one axis only if each has the primary's range.

    Raises:
        SpecError: naming the first dimension whose range differs.
    """
    for name in spec.dims[1:]:
        if spec.ranges[name] != spec.axis:
            raise SpecError(name, (
                f"{name} is {spec.ranges[name].to_json()} but {spec.dim} is "
                f"{spec.axis.to_json()}: a run tunes one range axis; give {name} the same "
                f"range as {spec.dim} (self-attention: both take every size) or one value"))


def _size_range(name: str, value: dict | list) -> SizeRange:
    if isinstance(value, list):
        return _size_list(name, value)
    if set(value) != {"min", "max"}:
        raise SpecError(name, 'a range is {"min": <size>, "max": <size>}')
    low, high = value["min"], value["max"]
    for key, size in (("min", low), ("max", high)):
        if not _is_size(size):
            raise SpecError(f"{name}.{key}", f"{size!r} is not an integer in 1..{MAX_DIM}")
    if low > high:
        raise SpecError(f"{name}.min", f"min {low} is greater than max {high}")
    return SizeRange(low, high)


def _size_list(name: str, value: list) -> SizeRange:
    if not value:
        raise SpecError(name, "a list of sizes needs at least one size")
    if len(value) > MAX_LISTED_SIZES:
        raise SpecError(name, f"{len(value)} sizes; give at most {MAX_LISTED_SIZES}, or a range")
    for index, size in enumerate(value):
        if not _is_size(size):
            raise SpecError(f"{name}.{index}", f"{size!r} is not an integer in 1..{MAX_DIM}")
    listed = tuple(sorted(set(value)))
    if len(listed) != len(value):
        raise SpecError(name, "sizes are listed more than once")
    return SizeRange(listed[0], listed[-1], listed)


def _is_size(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_DIM


__all__ = ["MAX_LISTED_SIZES", "RangeSpec", "SizeRange", "is_range_params",
           "is_range_value", "parse_range_spec"]
