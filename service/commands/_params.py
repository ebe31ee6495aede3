"""Operator parameters from the command line: ``--m 4096 --dtype float16``.

Flags are the spec's field names (``--kv-heads`` and ``--kv_heads`` both work); a field
that is itself a model (GEMM's ``epilogue``) takes JSON (``--epilogue '{"act": "gelu"}'``)
or one flag per sub-field (``--epilogue.bias --epilogue.act gelu``). Shorthands
(``--seq``, ``--dtype fp16``) are the operator specs' own table
(``scheduler_search.ops.aliases``), which the API reads too. A dimension that may be tuned
over a range takes ``LOW:HIGH`` or a list ``1,7,64`` (``--m 1:16384``: a range run,
``docs/dynamic.md``). Values are converted by the field's type, then validated by the
spec itself, so the CLI and the API report the same errors.
"""

from __future__ import annotations

import json
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from scheduler_search.ops import (
    OPERATORS,
    PIPELINES,
    OperatorSpec,
    PipelineSpec,
    SpecError,
    runtime_dims,
)
from scheduler_search.ops.aliases import DTYPE_PARAMS, PARAM_ALIASES, canonical_dtype

_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def _convert(annotation: Any, raw: str, flag: str) -> Any:
    optional = [a for a in typing.get_args(annotation) if a is not type(None)]
    if type(None) in typing.get_args(annotation) and len(optional) == 1:
        annotation = optional[0]  # an optional field (``out_dtype``): its type
    if annotation is bool:
        if raw.lower() in _TRUE:
            return True
        if raw.lower() in _FALSE:
            return False
        raise SpecError(flag, f"expected true or false, got {raw!r}")
    if annotation is int:
        try:
            return int(raw)
        except ValueError:
            raise SpecError(flag, f"expected an integer, got {raw!r}") from None
    if annotation is float:
        try:
            return float(raw)
        except ValueError:
            raise SpecError(flag, f"expected a number, got {raw!r}") from None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        try:
            return json.loads(raw)
        except json.JSONDecodeError as exc:
            raise SpecError(flag, f"expected a JSON object, got {raw!r} ({exc.msg})") from None
    if typing.get_origin(annotation) is typing.Literal or annotation is str:
        return canonical_dtype(raw) if flag in DTYPE_PARAMS else raw
    raise SpecError(flag, f"cannot read a value of type {annotation} from the command line")


def parse_params(op: str, extra: list[str]) -> dict[str, Any]:
    """``--name value`` pairs (or ``--flag`` alone for booleans) -> params dict.

    Raises:
        SpecError: unknown operator or flag, a missing value, a value of the wrong type.
    """
    fields = spec_class(op).model_fields
    aliases = PARAM_ALIASES.get(op, {})  # --seq: both of attention's lengths
    params: dict[str, Any] = {}
    i = 0
    while i < len(extra):
        token = extra[i]
        if not token.startswith("--"):
            raise SpecError(token, "expected --PARAM VALUE")
        name = token[2:].replace("-", "_")
        name, _, sub = name.partition(".")
        targets = aliases.get(name, (name,))
        if any(t not in fields for t in targets):
            known = ", ".join(f"--{f}" for f in [*fields, *aliases])
            raise SpecError(name, f"unknown parameter for {op}; known: {known}")
        annotation = fields[targets[0]].annotation
        if sub:
            annotation = _sub_field(annotation, name, sub)
        has_value = i + 1 < len(extra) and not extra[i + 1].startswith("--")
        if annotation is bool and not has_value:
            value: Any = True
            i += 1
        elif not has_value:
            raise SpecError(name, "missing value")
        elif (all(t in runtime_dims(op) for t in targets)
              and any(c in extra[i + 1] for c in ":,")):
            # ``--seq 128:16384`` sets seq_q and seq_kv to one range: a tied axis.
            value = _size_range(extra[i + 1], name)
            i += 2
        else:
            value = _convert(annotation, extra[i + 1], name)
            i += 2
        for target in targets:
            if sub:
                params.setdefault(target, {})[sub] = value
            else:
                params[target] = value
    return params


def _size_range(raw: str, flag: str) -> dict[str, int] | list[int]:
    """``LOW:HIGH`` as ``{"min": LOW, "max": HIGH}``, ``a,b,c`` as a list of sizes (the
    range spec then checks them)."""
    parts = raw.split(":") if ":" in raw else raw.split(",")
    try:
        sizes = [int(p) for p in parts]
    except ValueError:
        raise SpecError(flag, f"expected a size, LOW:HIGH or sizes a,b,c; got {raw!r}") from None
    if ":" in raw:
        if len(sizes) != 2:
            raise SpecError(flag, f"expected LOW:HIGH, got {raw!r}")
        return {"min": sizes[0], "max": sizes[1]}
    return sizes


def _sub_field(annotation: Any, name: str, sub: str) -> Any:
    """The type of ``--name.sub``: a field of the model that field ``name`` holds."""
    if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        raise SpecError(f"{name}.{sub}", f"--{name} has no sub-fields")
    if sub not in annotation.model_fields:
        known = ", ".join(f"--{name}.{f}" for f in annotation.model_fields)
        raise SpecError(f"{name}.{sub}", f"unknown sub-field; known: {known}")
    return annotation.model_fields[sub].annotation


def spec_class(op: str) -> type[OperatorSpec] | type[PipelineSpec]:
    """The spec class of an operator or a pipeline (``mamba2_ssd``).

    Raises:
        SpecError: ``op`` is neither.
    """
    found = OPERATORS.get(op) or PIPELINES.get(op)
    if found is None:
        known = ", ".join(sorted({*OPERATORS, *PIPELINES}))
        raise SpecError("op", f"unknown operator {op!r}; known: {known}")
    return found


def spec_from_cli(op: str, extra: list[str]) -> OperatorSpec:
    """Parse and validate an operator's (one kernel's) spec; raises SpecError or
    pydantic.ValidationError."""
    if op not in OPERATORS:
        known = ", ".join(sorted(OPERATORS))
        raise SpecError("op", f"{op!r} is not a single kernel's operator; known: {known}")
    return OPERATORS[op].model_validate(parse_params(op, extra))


def describe_errors(error: Exception) -> list[str]:
    """One ``field: message`` line per problem of a SpecError or ValidationError."""
    if isinstance(error, SpecError):
        return [f"{error.field}: {error.message}"]
    if isinstance(error, ValidationError):
        return [
            f"{'.'.join(str(p) for p in e['loc']) or 'params'}: {e['msg']}" for e in error.errors()
        ]
    return [str(error)]
