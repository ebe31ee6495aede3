"""What the skeleton emitted, recorded as it emits: the evidence that the kernel is the
sProgram.

Each emitter appends to the record at the point it writes the text (an sTask issued by a
role, a ring initialised with its depth and arrivals, a turn barrier waited on or passed,
an MMA wait), so a test can hold the record against the sProgram without reading the
source text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler_search.hardware.model import UnitKind


@dataclass(frozen=True)
class EmittedIssue:
    """An sTask instance written into a role's code."""

    stask: str
    unit: UnitKind
    phase: str
    stage: str


@dataclass(frozen=True)
class EmittedRing:
    """An mbarrier ring initialised in the kernel."""

    stream: str
    full: str
    empty: str
    depth: int
    full_arrivals: int
    empty_arrivals: int
    tx_bytes: int


@dataclass(frozen=True)
class EmittedTurn:
    """A named barrier between consumer warpgroups: ``waits`` before ``stask``."""

    name: str
    barrier_id: int
    waits: str
    passes: str
    stask: str


@dataclass
class EmissionRecord:
    """The kernel's structure as written, per role and per barrier."""

    roles: dict[str, list[EmittedIssue]] = field(default_factory=dict)
    rings: dict[str, EmittedRing] = field(default_factory=dict)
    turns: dict[str, EmittedTurn] = field(default_factory=dict)
    #: MMA groups left pending after each MMA sTask's wait (0: it waits for itself).
    mma_pending: dict[str, int] = field(default_factory=dict)
    #: setmaxnreg budget per role (absent without warp specialisation).
    register_budgets: dict[str, int] = field(default_factory=dict)
    #: Tiles loaded once per output tile: load sTask -> (full, empty) barriers.
    tile_buffers: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: MMA result waits (an MMA's result read by the CUDA cores) -> the MMA whose
    #: wait satisfies them.
    result_waits: dict[str, str] = field(default_factory=dict)

    def issue(self, role: str, issue: EmittedIssue) -> None:
        self.roles.setdefault(role, []).append(issue)

    def sequence(self, role: str) -> list[tuple[str, UnitKind]]:
        """``role``'s sTasks in the order they were written, with their sEUs."""
        return [(i.stask, i.unit) for i in self.roles.get(role, [])]
