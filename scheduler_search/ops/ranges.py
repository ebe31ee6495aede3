"""Specs over a range of sizes: one tuning run for every size a dimension takes.

In LLM serving the token count ``m`` of a GEMM changes with every batch, and attention's
sequence lengths with every request. A *range spec* gives such a dimension as a range,
``{"min": 1, "max": 16384}``, or as a list of the sizes it takes, ``[1, 7, 64, 300]``,
and every other parameter as one value, as an exact spec does:

    {"m": {"min": 1, "max": 16384}, "n": 4096, "k": 4096, "dtype": "float16"}

Only the dimensions an operator's kernels can take at run time may be ranges
(:data:`RANGE_DIMS`). A range spec is validated as strictly as an exact one: the range
itself (``min <= max``, within the dimension's bounds), and the exact spec at every corner
of the ranges (each dimension at its smallest and largest size): the operators' other
checks grow with a dimension (memory footprint) or do not involve it, so the corners
stand for every size between. Errors name the field (``m.min``, ``seq_kv``).

:meth:`RangeSpec.sample` draws the sizes a search measures a candidate at: log-uniform
over the range (users' sizes spread over orders of magnitude: 1, 7, 64, 300, 4096), the
endpoints always included.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from scheduler_search.ops._base import MAX_DIM, OperatorSpec, SpecError

#: Operator -> the dimensions its kernels may take at run time (grid, bounds and TMA
#: descriptors built for the actual size, tails masked).
RANGE_DIMS: dict[str, tuple[str, ...]] = {
    "gemm": ("m",),
    "attention": ("seq_q", "seq_kv"),
}

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
    """An operator's params with some dimensions given as :class:`SizeRange`."""

    op: str
    #: Every parameter that is one value, as the request gives it.
    fixed: Mapping[str, Any]
    ranges: Mapping[str, SizeRange]

    def exact(self, sizes: Mapping[str, int]) -> OperatorSpec:
        """The exact spec at ``sizes`` (one size per range dimension, each in range).

        Raises:
            SpecError: a dimension is missing, unknown, or outside its range.
        """
        from scheduler_search.ops import parse_spec

        if set(sizes) != set(self.ranges):
            raise SpecError(next(iter(set(sizes) ^ set(self.ranges))),
                            f"sizes must give exactly {', '.join(sorted(self.ranges))}")
        for name, size in sizes.items():
            if size not in self.ranges[name]:
                raise SpecError(name, f"{size} is outside {self.ranges[name].to_json()}")
        return parse_spec(self.op, {**self.fixed, **sizes})

    def contains(self, params: Mapping[str, Any]) -> bool:
        """Whether exact ``params`` are one of this spec's workloads: the same fixed
        parameters, and each range dimension's size in its range."""
        if set(params) != set(self.fixed) | set(self.ranges):
            return False
        return (all(params[k] == v for k, v in self.fixed.items())
                and all(params[name] in r for name, r in self.ranges.items()))

    def corners(self) -> Iterator[dict[str, int]]:
        """Each range dimension at its smallest or largest size, every combination."""
        names = sorted(self.ranges)
        ends = [sorted({self.ranges[n].low, self.ranges[n].high}) for n in names]
        for values in itertools.product(*ends):
            yield dict(zip(names, values, strict=True))

    def sample(self, count: int, seed: int = 0) -> list[dict[str, int]]:
        """Sizes to measure at: ``count`` sizes of each range dimension (log-uniform, the
        ends included), combined in order where there are several (seeded)."""
        rng = random.Random(seed)
        per_dim = {name: r.sample(count, rng) for name, r in sorted(self.ranges.items())}
        width = max(len(sizes) for sizes in per_dim.values())
        return [{name: sizes[min(i, len(sizes) - 1)] for name, sizes in per_dim.items()}
                for i in range(width)]

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
    from scheduler_search.ops import OPERATORS

    if op not in OPERATORS:
        raise SpecError("op", f"unknown operator {op!r}; known: {', '.join(sorted(OPERATORS))}")
    allowed = RANGE_DIMS.get(op, ())
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
    for corner in spec.corners():
        try:
            spec.exact(corner)
        except ValidationError as error:
            first = error.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or next(iter(corner))
            at = ", ".join(f"{k}={v}" for k, v in corner.items())
            raise SpecError(field, f"{first['msg']} (at {at})") from error
    return spec


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


__all__ = ["MAX_LISTED_SIZES", "RANGE_DIMS", "RangeSpec", "SizeRange", "is_range_params",
           "is_range_value", "parse_range_spec"]
