"""Shorthands users type for operator parameters, the one table the API and the command
line share (issue 42: the CLI took ``--dtype fp16`` and ``--seq``, the API refused them).

The specs themselves stay strict (``parse_spec`` takes only their own names); a request
is expanded where it comes in (``service.schemas.TuneRequest`` for the API and
``pipetune.tune``, ``service.commands._params`` for the command line), so a workload is
stored (and keyed) as the spec writes it: ``{"dtype": "fp16"}`` and
``{"dtype": "float16"}`` are one workload, as are attention's ``{"seq": 4096}`` and
``{"seq_q": 4096, "seq_kv": 4096}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler_search.ops._base import SpecError

#: Operator -> shorthand -> the parameters it sets to its value: attention's ``seq`` sets
#: both sequence lengths (self-attention; a range given to it ties the two).
PARAM_ALIASES: dict[str, dict[str, tuple[str, ...]]] = {
    "attention": {"seq": ("seq_q", "seq_kv")},
}

#: Short dtype names (any case) and the dtype each means.
DTYPE_ALIASES: dict[str, str] = {"fp16": "float16", "half": "float16", "bf16": "bfloat16",
                                 "fp8": "float8_e4m3", "e4m3": "float8_e4m3",
                                 "e5m2": "float8_e5m2"}

#: Parameters that hold a dtype.
DTYPE_PARAMS = ("dtype", "out_dtype")


def canonical_dtype(value: Any) -> Any:
    """The dtype a short name means (``fp16`` -> ``float16``); anything else as given
    (the spec then checks it)."""
    if isinstance(value, str):
        return DTYPE_ALIASES.get(value.lower(), value)
    return value


def expand_aliases(op: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with every shorthand of ``op`` replaced by what it means.

    Raises:
        SpecError: a shorthand given together with a parameter it sets (``seq`` with
            ``seq_q``), under the shorthand's name.
    """
    expanded: dict[str, Any] = {}
    aliases = PARAM_ALIASES.get(op, {})
    for name, value in params.items():
        targets = aliases.get(name)
        if targets is None:
            expanded[name] = canonical_dtype(value) if name in DTYPE_PARAMS else value
            continue
        clash = [t for t in targets if t in params]
        if clash:
            raise SpecError(name, f"{name} sets {' and '.join(targets)}; give {name} or "
                                  f"{', '.join(clash)}, not both")
        expanded.update(dict.fromkeys(targets, value))
    return expanded


__all__ = ["DTYPE_ALIASES", "DTYPE_PARAMS", "PARAM_ALIASES", "canonical_dtype",
           "expand_aliases"]
