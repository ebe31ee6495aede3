"""Knobs: the search dimensions of a schedule space, declared as data.

A knob is one choice the search makes (a tile extent, a stage count, an sEU for an
sTask). Knobs are ordered; a knob's ``when`` condition sees the choices made before it,
so the space is define-by-run, as Optuna samples it: a pingpong split is only asked for
when there are two consumer warpgroups. ``structural`` knobs change the per-SM sProgram
(and its validity); the others (tile order over the grid) change only the global cost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Choices = dict[str, Any]


@dataclass(frozen=True)
class Knob:
    """One categorical search dimension.

    Args:
        name: the choice key (see ``scheduler_search.sprogram.plan`` for their meaning).
        options: values in a stable order; JSON scalars only.
        when: condition on earlier choices; the knob is absent from the choices otherwise.
        structural: False when the knob never changes validity or the per-SM simulation.
        default: the option a schedule has when its choices leave the knob out (choices
            written before the knob existed: a cached schedule, a hand-written design), so
            that a seed keeps its schedule instead of having the knob sampled.
        viable: the options worth enumerating after earlier choices (default: all), for
            walks of the whole space: the others are invalid there. The sampler is still
            offered every option (Optuna wants one distribution per name); what it picks
            outside them is rejected as invalid.
    """

    name: str
    options: tuple[Any, ...]
    when: Callable[[Choices], bool] | None = None
    structural: bool = True
    default: Any = None
    viable: Callable[[Choices], tuple[Any, ...]] | None = None

    def applies(self, choices: Choices) -> bool:
        return self.when is None or self.when(choices)

    def viable_options(self, choices: Choices) -> tuple[Any, ...]:
        return self.options if self.viable is None else self.viable(choices)


def needs_two_consumers(choices: Choices) -> bool:
    return choices.get("consumer_warpgroups", 1) >= 2


def is_warp_specialized(choices: Choices) -> bool:
    return bool(choices.get("warp_specialized"))
