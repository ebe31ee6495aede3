"""Deterministic samples of renderable schedules, for the compile tests and GPU checks.

A seeded random trial walks the knob table define-by-run (as Optuna's would); points the
space rejects (``check_valid`` or the renderer) are drawn again. The same seed gives the
same schedules on every machine.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from codegen import feasibility
from scheduler_search.hardware.model import Device
from scheduler_search.ops import OperatorSpec
from scheduler_search.space import ScheduleSpace
from scheduler_search.sprogram import SProgram


class _SeededTrial:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        del name
        return self.rng.choice(list(choices))


def sample_schedules(
    spec: OperatorSpec, device: Device, count: int, seed: int = 0, max_draws: int = 20000
) -> Iterator[SProgram]:
    """``count`` distinct valid, renderable sPrograms of ``spec``'s space."""
    space = ScheduleSpace(spec, device, feasibility(spec.op, device))
    rng = random.Random(f"{seed}:{spec.workload_key()}")
    seen: set[str] = set()
    for _ in range(max_draws):
        if len(seen) == count:
            return
        choices = space.suggest(_SeededTrial(rng))
        sprogram, validity = space.build(choices)
        if validity.ok and sprogram.hash not in seen:
            seen.add(sprogram.hash)
            yield sprogram
    raise RuntimeError(f"found only {len(seen)} valid schedules in {max_draws} draws")
