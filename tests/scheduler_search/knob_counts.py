"""Counting a define-by-run knob table's points independently of ``ScheduleSpace``, for
the tests that check the space's own count."""

from __future__ import annotations

import math
from typing import Any

from scheduler_search.space.knobs import Knob


def count_points(knobs: list[Knob]) -> int:
    """Points of a define-by-run knob table, walked independently of ScheduleSpace.

    The knobs after the last one with a condition are asked in every point: they multiply
    the count of the walk of the knobs before them instead of being walked (the walk of a
    suite space takes a tenth of a second, not one or two)."""
    free = len(knobs)
    while free > 0 and knobs[free - 1].when is None:
        free -= 1
    tail = math.prod(len(k.options) for k in knobs[free:])
    choices: dict[str, Any] = {}

    def walk(index: int) -> int:
        if index == free:
            return tail
        knob = knobs[index]
        if not knob.applies(choices):
            return walk(index + 1)
        total = 0
        for option in knob.options:
            choices[knob.name] = option
            total += walk(index + 1)
        del choices[knob.name]
        return total

    return walk(0)
