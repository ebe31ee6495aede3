"""Operator specs: one module per operator behind the OperatorSpec protocol."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from scheduler_search.ops._base import OperatorSpec, SpecError
from scheduler_search.ops._contract import DTYPE_BYTES, InputInit, TensorSpec
from scheduler_search.ops.attention import AttentionSpec
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.ops.mamba2 import Mamba2ChunkScanSpec, Mamba2ChunkStateSpec
from scheduler_search.ops.mamba2_ssd import Mamba2SSDSpec
from scheduler_search.ops.pipelines import PIPELINES, PipelineSpec, parse_pipeline
from scheduler_search.ops.ranges import (
    RangeSpec,
    SizeRange,
    is_range_params,
    parse_range_spec,
)
from scheduler_search.ops.registry import OPERATORS, register_operator, runtime_dims


def parse_spec(op: str, params: dict[str, Any]) -> OperatorSpec:
    """Validate ``params`` for operator ``op``.

    Raises:
        SpecError: ``op`` is not a known operator (field ``op``).
        pydantic.ValidationError: a parameter is missing, extra, mistyped or out of range;
            each error's ``loc`` names the parameter.
    """
    if op not in OPERATORS:
        raise SpecError("op", f"unknown operator {op!r}; known: {', '.join(sorted(OPERATORS))}")
    return OPERATORS[op].model_validate(params)


def workload_tensors(op: str, params: dict[str, Any]) -> list[TensorSpec]:
    """The tensor contract of a workload given as plain ``op`` and ``params``.

    The params are not validated again: whoever holds a workload (a worker's job, a
    kernel's artifact) got it validated when it was made, and the references are also
    checked on tiny ragged shapes that no kernel is tuned for.

    Raises:
        ValueError: ``op`` is not a known operator.
    """
    if op not in OPERATORS:
        raise ValueError(f"unknown operator {op!r}")
    return OPERATORS[op].model_construct(**params).tensors()


__all__ = [
    "DTYPE_BYTES",
    "OPERATORS",
    "PIPELINES",
    "AttentionSpec",
    "GemmSpec",
    "InputInit",
    "Mamba2ChunkScanSpec",
    "Mamba2ChunkStateSpec",
    "Mamba2SSDSpec",
    "OperatorSpec",
    "PipelineSpec",
    "RangeSpec",
    "SizeRange",
    "SpecError",
    "TensorSpec",
    "ValidationError",
    "is_range_params",
    "parse_pipeline",
    "parse_range_spec",
    "parse_spec",
    "register_operator",
    "runtime_dims",
    "workload_tensors",
]
