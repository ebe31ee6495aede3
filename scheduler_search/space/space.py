"""The schedule space of one workload on one device: enumerate, count, sample.

:class:`ScheduleSpace` walks the knob table depth first. Structural choices are planned
into an sProgram and checked with ``check_valid``; the non-structural knobs (tile order
over the grid) never change validity, so they multiply the count instead of being
enumerated one by one, which keeps the walk over hundreds of thousands of schedules fast.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Protocol

from scheduler_search.hardware.model import Device
from scheduler_search.ops import OperatorSpec
from scheduler_search.space.knobs import Choices, Knob
from scheduler_search.space.tables import knob_table
from scheduler_search.sprogram import (
    Decisions,
    Rejection,
    RejectReason,
    SProgram,
    Validity,
    check_tiles,
    check_valid,
    emit_sprogram,
    plan_sprogram,
    resolve_choices,
)

#: Rejection count key of valid schedules that the code generator cannot render.
CODEGEN_REJECTION = "unsupported_by_codegen"

#: Why a valid sProgram cannot be generated, or None: the code generator's check, given
#: to the space by whoever composes the two (the search half never imports codegen). It
#: may also have ``tile_problem(spec, tile)``: why no schedule of a tile can be generated.
Feasibility = Callable[[SProgram], "str | None"]


class CategoricalTrial(Protocol):
    """What :meth:`ScheduleSpace.suggest` needs of a trial (``optuna.Trial`` has it)."""

    def suggest_categorical(self, name: str, choices: Any) -> Any: ...


@dataclass(frozen=True)
class Candidate:
    """A valid structural point: its choices, resolved decisions and resource use; the
    sProgram is emitted on first use (without a feasibility check most candidates are
    only counted)."""

    spec: OperatorSpec
    device: Device
    decisions: Decisions
    validity: Validity

    @property
    def choices(self) -> Choices:
        return self.decisions.choices

    @cached_property
    def sprogram(self) -> SProgram:
        return emit_sprogram(self.spec, self.device, self.decisions)


@dataclass
class SpaceCount:
    """Sizes of the space: valid schedules and rejections by reason (full products,
    including the non-structural knobs)."""

    valid: int = 0
    rejected: Counter = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return self.valid + sum(self.rejected.values())


def _fix(knobs: list[Knob], fixed: Choices) -> list[Knob]:
    """``knobs`` with each one ``fixed`` names reduced to the option it is held at."""
    by_name = {k.name: k for k in knobs}
    for name, value in fixed.items():
        if name not in by_name:
            raise ValueError(f"fixed: the space has no knob {name!r}")
        if value not in by_name[name].options:
            raise ValueError(f"fixed: {name}={value!r} is not one of "
                             f"{list(by_name[name].options)}")
    return [replace(k, options=(fixed[k.name],)) if k.name in fixed else k for k in knobs]


class ScheduleSpace:
    """The space of sPrograms for ``spec`` on ``device``.

    Args:
        feasible: restricts the space to what can be generated: it is asked about every
            schedule that passes ``check_valid`` and answers why it cannot be generated,
            or None. Without it the space is the cost model's whole space (simulated
            devices, operators without code generation).
        fixed: knobs held at one of their options: the space is the slice of the whole
            one where they take it (a benchmark exploring part of a space).

    Raises:
        ValueError: ``fixed`` names a knob the space does not have, or an option it lacks.
    """

    def __init__(
        self, spec: OperatorSpec, device: Device, feasible: Feasibility | None = None,
        fixed: Choices | None = None,
    ) -> None:
        self.spec = spec
        self.device = device
        self.feasible = feasible
        self.knobs: list[Knob] = _fix(knob_table(spec, device), fixed or {})

    def _problem(self, sprogram: SProgram) -> str | None:
        return self.feasible(sprogram) if self.feasible is not None else None

    def _tile_problem(self, tile: dict[str, int]) -> str | None:
        """Why no schedule of ``tile`` can be generated, where the feasibility check can
        tell from the tile alone (its ``tile_problem``): the tile's completions are then
        counted as such without an sProgram each."""
        screen = getattr(self.feasible, "tile_problem", None)
        return screen(self.spec, tile) if screen is not None else None

    @property
    def structural_knobs(self) -> list[Knob]:
        return [k for k in self.knobs if k.structural]

    @property
    def order_knobs(self) -> list[Knob]:
        return [k for k in self.knobs if not k.structural]

    def _walk(self, knobs: list[Knob], index: int, choices: Choices) -> Iterator[Choices]:
        if index == len(knobs):
            yield dict(choices)
            return
        knob = knobs[index]
        if not knob.applies(choices):
            yield from self._walk(knobs, index + 1, choices)
            return
        for option in knob.viable_options(choices):
            choices[knob.name] = option
            yield from self._walk(knobs, index + 1, choices)
        choices.pop(knob.name, None)

    def structural_choices(self) -> Iterator[Choices]:
        """Every combination of the structural knobs, in table order."""
        yield from self._walk(self.structural_knobs, 0, {})

    def order_choices(self) -> Iterator[Choices]:
        """Every combination of the non-structural (tile order) knobs."""
        yield from self._walk(self.order_knobs, 0, {})

    def build(self, choices: Choices) -> tuple[SProgram, Validity]:
        """The sProgram of ``choices`` and its validity (a schedule the code generator
        cannot render is invalid: ``unsupported_on_arch``, detail ``codegen: ...``)."""
        sprogram = plan_sprogram(self.spec, self.device, choices)
        validity = check_valid(sprogram, self.spec, self.device)
        if validity.ok:
            problem = self._problem(sprogram)
            if problem:
                validity = replace(
                    validity,
                    rejections=(Rejection(RejectReason.UNSUPPORTED, f"codegen: {problem}"),),
                )
        return sprogram, validity

    def enumerate(
        self, on_tile: Callable[[int, int], None] | None = None,
        shard: tuple[int, int] = (0, 1),
    ) -> tuple[list[Candidate], SpaceCount]:
        """All valid structural candidates, and the count of the whole space.

        Tile knobs come first in every table; a tile that fails the tile-only rules is
        rejected with all its completions at once, counted without being built. Options a
        knob's ``viable`` leaves out after earlier choices are not walked, and neither
        counted valid nor rejected (the count is then below the knobs' product).
        ``on_tile(done, tiles)`` is called after each tile (a command's progress bar).
        ``shard`` ``(i, n)``: only the ``i``-th of ``n`` runs of consecutive tiles, and the
        count of those (``n`` processes walk the space between them; their candidates, in
        shard order, are the whole walk's, in its order).
        """
        structural = self.structural_knobs
        tile_knobs = [k for k in structural if k.name.startswith("tile_")]
        rest = structural[len(tile_knobs) :]
        completions = sum(1 for _ in self._walk(rest, 0, {}))
        multiplier = math.prod(len(k.options) for k in self.order_knobs)
        count = SpaceCount()
        valid: list[Candidate] = []
        index, shards = shard
        tiles = list(self._walk(tile_knobs, 0, {}))
        tiles = tiles[len(tiles) * index // shards: len(tiles) * (index + 1) // shards]
        for done, tile_choice in enumerate(tiles, start=1):
            if on_tile is not None:
                on_tile(done - 1, len(tiles))
            tile = {k.removeprefix("tile_"): v for k, v in tile_choice.items()}
            tile_problems = check_tiles(tile, self.spec)
            if tile_problems:
                count.rejected[tile_problems[0].reason.value] += completions * multiplier
                continue
            ungenerable = self._tile_problem(tile) is not None
            for choices in self._walk(rest, 0, dict(tile_choice)):
                decisions = resolve_choices(self.spec, self.device, choices)
                validity = check_valid(decisions, self.spec, self.device)
                if not validity.ok:
                    count.rejected[validity.reason.value] += multiplier
                    continue
                candidate = Candidate(self.spec, self.device, decisions, validity)
                if ungenerable or (self.feasible is not None
                                   and self._problem(candidate.sprogram)):
                    count.rejected[CODEGEN_REJECTION] += multiplier
                else:
                    valid.append(candidate)
                    count.valid += multiplier
        if on_tile is not None:
            on_tile(len(tiles), len(tiles))
        return valid, count

    def with_order(self, candidate: Candidate, order: Choices) -> SProgram:
        """The candidate's sProgram with a tile order applied."""
        return plan_sprogram(self.spec, self.device, {**candidate.choices, **order})

    def sample(self, rng: random.Random) -> Choices:
        """A random point: each knob that applies drawn uniformly among the options its
        ``viable`` leaves after the earlier choices (the walk's options). Cheaper than
        asking a sampler, and far fewer draws are points that cannot run: of 1 x 4096 x
        4096's random points 2.8% were valid over every option, 7.2% over viable ones."""
        choices: Choices = {}
        for knob in self.knobs:
            if knob.applies(choices):
                choices[knob.name] = rng.choice(list(knob.viable_options(choices)))
        return choices

    def suggest(self, trial: CategoricalTrial) -> Choices:
        """Define-by-run sampling: ask ``trial`` for each knob that applies, in order."""
        choices: Choices = {}
        for knob in self.knobs:
            if knob.applies(choices):
                choices[knob.name] = trial.suggest_categorical(knob.name, list(knob.options))
        return choices
