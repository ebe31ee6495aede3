"""What every operator command shares: the operator positional with each operator's
parameters listed under ``--help``, ``--device`` in the API's one syntax (``auto``,
``sim:NAME``, ``cuda:N``), and ``--fix`` for the commands that walk a schedule space."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import typing
from typing import Any

from scheduler_search.hardware import CATALOG, Device
from scheduler_search.ops import OPERATORS, PIPELINES
from scheduler_search.ops.aliases import DTYPE_ALIASES, PARAM_ALIASES
from service.commands._params import spec_class

DEVICE_HELP = (
    "auto (a local GPU, else sim:h200; the default), "
    + ", ".join(f"sim:{name}" for name in sorted(CATALOG))
    + " (the simulated device), or cuda:N (local GPU N)"
)


def _value_text(annotation: Any, metadata: list[Any]) -> str:
    """How a field's value is written: ``INT (1..65536)``, ``{kn,nk}``, ``[flag]``."""
    if annotation is bool:
        return "[true|false]"
    if typing.get_origin(annotation) is typing.Literal:
        return "{" + ",".join(str(a) for a in typing.get_args(annotation)) + "}"
    low = next((m.ge for m in metadata if getattr(m, "ge", None) is not None), None)
    high = next((m.le for m in metadata if getattr(m, "le", None) is not None), None)
    bounds = f" ({low}..{high})" if low is not None and high is not None else ""
    return ("INT" if annotation is int else str(annotation)) + bounds


def parameters_help(pipelines: bool = False) -> str:
    """Each operator's parameters as ``--flag VALUE [default]``, for an ``--help`` epilog
    (with ``pipelines``, the pipelines' too)."""
    lines = ["operator parameters (--name VALUE; [default]):"]
    for op in _operators(pipelines):
        flags = []
        for name, field in spec_class(op).model_fields.items():
            text = f"--{name.replace('_', '-')} {_value_text(field.annotation, field.metadata)}"
            if not field.is_required():
                text += f" [{field.default}]"
            flags.append(text)
        flags += [f"--{alias} (sets {', '.join(targets)})"
                  for alias, targets in PARAM_ALIASES.get(op, {}).items()]
        lines.append(textwrap.fill(f"{op}: " + "  ".join(flags), width=88,
                                   initial_indent="  ", subsequent_indent="      "))
    aliases = ", ".join(f"{short} = {name}" for short, name in DTYPE_ALIASES.items())
    lines.append(f"  --dtype also takes {aliases}")
    return "\n".join(lines)


def _operators(pipelines: bool) -> list[str]:
    return sorted({*OPERATORS, *(PIPELINES if pipelines else ())})


def add_operator_parser(subparsers: argparse._SubParsersAction, name: str, *, help: str,
                        description: str | None, example: str,
                        pipelines: bool = False) -> argparse.ArgumentParser:
    """A subcommand taking ``OP --PARAM VALUE ...``, whose ``--help`` lists the parameters;
    ``pipelines``: OP may also be a pipeline (``mamba2_ssd``)."""
    parser = subparsers.add_parser(
        name, help=help, description=description,
        epilog=f"Example: {example}\n\n{parameters_help(pipelines)}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        # Operator parameters pass through unparsed: --k must never abbreviate an option.
        allow_abbrev=False,
    )
    parser.add_argument("op", choices=_operators(pipelines), help="operator")
    parser.add_argument("--device", default="auto", help=DEVICE_HELP)
    return parser


def knob_value(text: str) -> tuple[str, Any]:
    """``tile_k=64`` -> ("tile_k", 64): a knob and its value as JSON (bare words are
    strings, ``true`` a bool)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not KNOB=VALUE")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


def add_fix_option(parser: argparse.ArgumentParser) -> None:
    """``--fix KNOB=VALUE ...``: the slice of the space where those knobs take those
    values (``ScheduleSpace``'s ``fixed``; an unknown knob or option is an error)."""
    parser.add_argument("--fix", nargs="+", default=[], type=knob_value, metavar="KNOB=VALUE",
                        help="only the slice of the space where these knobs take these "
                             "values (e.g. --fix warp_specialized=true tile_k=64)")


def device_model(name: str) -> Device:
    """The hardware model behind a device name (a live GPU's own properties for
    ``cuda:N``); raises ``DeviceError`` naming the accepted names."""
    from service.runs.devices import resolve_device

    return resolve_device(name).model


class PhaseBar:
    """A progress bar on stderr for a command's long phases (enumerating a space,
    ranking it), so a command never sits silent for tens of seconds.

    Pass :meth:`phase` ``(label)`` as the ``on_tile`` / ``on_bound`` callback of
    ``ScheduleSpace.enumerate`` / ``rank_top``.
    """

    def __init__(self, enabled: bool | None = None) -> None:
        """``enabled``: default, when stderr is a terminal (logs and pipes stay clean)."""
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._bar: Any = None
        self._label = ""

    def phase(self, label: str) -> typing.Callable[[int, int], None]:
        def update(done: int, total: int) -> None:
            if not self.enabled:
                return
            if self._bar is None or self._label != label:
                self.close()
                from tqdm import tqdm

                self._bar, self._label = tqdm(total=total, desc=label, file=sys.stderr,
                                              leave=False, mininterval=0.5), label
            self._bar.n = done
            self._bar.refresh()

        return update

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
