"""The consumers' loop when the sProgram issues sTasks trips ahead (``lead``).

An sTask with lead 1 works, in loop iteration ``t``, on trip ``t + 1``: attention's
``mma_qk`` computes the next tile's scores while the CUDA cores run the softmax of the
current one (FlashAttention-3's intra-warpgroup overlap). The skeleton lowers it as a
software pipeline:

- a *prologue* issues the lead sTasks for trip 0 (none in the ``interleave`` order, which
  only waits for each MMA group where its result is read);
- the loop runs every trip but the last; the last is written after it without its lead
  sTasks (an MMA inside a branch would make ptxas serialise every MMA: C7520);
- every MMA issue commits one MMA group, so the wait before an sTask that reads an
  MMA's result is the target's MMA wait with the count of groups committed since
  (:func:`group_waits`; the prologue and the last trip commit fewer, and an empty group
  made ptxas serialise the MMAs, C7520);
- a ring stage is released once the wait that proves its last reader's group complete
  has passed (:func:`release_points`); what is still in flight after the loop is waited
  for and released there; a stage whose last reader is math (a relayout) is released
  as soon as it is written;
- a tile buffer (attention's Q) whose one reader in the loop is an MMA is released with
  that MMA's stage of the tile's last trip (:func:`early_tile_buffers`), not after the
  loop: the producer loads the next tile's copy under this tile's last trip.

A register fragment is not double-buffered: an sProgram whose lead MMA would overwrite
what a reader of the current trip still needs is the operator's to reject (a second
buffer made ptxas serialise the MMA pipeline, C7514, nvcc 13.0).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from codegen.pipeline.structure import Issue, PipelineStructure, TileBuffer
from scheduler_search.ir import STaskKind

if TYPE_CHECKING:
    from codegen.pipeline.consumers import Consumers


class Part(enum.Enum):
    """Which iterations of the pipelined loop a text is for."""

    PROLOGUE = "prologue"  # before the loop: the lead sTasks of trip 0
    STEADY = "steady"  # every trip but the last
    LAST = "last"  # the last trip: its lead sTasks would work on no trip


@dataclass(frozen=True)
class TripAt:
    """The loop trip an sTask instance works on, a C++ expression."""

    index: str = "trip"

    @property
    def accumulates(self) -> str:
        """True on the trips whose MMA adds to its accumulators (all but the first)."""
        return f"{self.index} > 0"


@dataclass(frozen=True)
class GroupWait:
    """An MMA wait that leaves ``pending`` groups in flight, before ``position`` of the
    loop stream, for the result of ``mma`` ``distance`` trips back from ``waiter``'s trip."""

    position: int
    waiter: str
    mma: str
    distance: int
    pending: int


def loop_stream(structure: PipelineStructure) -> tuple[Issue, ...]:
    """The consumers' loop sTasks in issue order (one text for every consumer)."""
    role = structure.consumer_roles[0]
    return tuple(i for i in structure.compute_stream(role) if i.phase == "loop")


def is_pipelined(structure: PipelineStructure) -> bool:
    """Whether the loop is lowered as a software pipeline: sTasks issued trips ahead, or
    (``interleave``) MMA results awaited only where they are read."""
    return (structure.sprogram.order == "interleave"
            or any(i.lead for i in loop_stream(structure)))


def _mma_positions(loop: tuple[Issue, ...]) -> list[int]:
    return [n for n, i in enumerate(loop) if i.kind is STaskKind.MMA]


def group_waits(structure: PipelineStructure) -> list[GroupWait]:
    """Every MMA wait of one loop iteration, with its pending-group count.

    Commits of iteration ``t``: the MMA issues in stream order, ``G`` per iteration. The
    reader at position ``w`` (lead ``l_w``) of trip ``t + l_w`` needs MMA ``m`` (lead
    ``l_m``, ``g_m``-th MMA of the stream) of trip ``t + l_w - d``, committed in iteration
    ``t + l_w - d - l_m``; the groups committed after it, up to ``w``, may stay pending:
    ``(d - l_w + l_m) G + (MMAs before w) - g_m - 1``. A negative count is a wait for a
    result not issued yet (the layout rejects such sPrograms).
    """
    loop = loop_stream(structure)
    names = [i.stask for i in loop]
    mmas = _mma_positions(loop)
    per_iteration = len(mmas)
    waits = []
    for barrier in structure.result_waits():
        (mma, distance), = barrier.deps
        if barrier.waiter not in names or mma not in names:
            continue
        w, m = names.index(barrier.waiter), names.index(mma)
        before = sum(1 for p in mmas if p < w)
        pending = ((distance - loop[w].lead + loop[m].lead) * per_iteration + before
                   - mmas.index(m) - 1)
        waits.append(GroupWait(w, barrier.waiter, mma, distance, pending))
    return sorted(waits, key=lambda g: (g.position, g.pending))


def release_points(structure: PipelineStructure) -> dict[str, tuple[int, int]]:
    """For each MMA that last reads a ring: (position of the first wait of an iteration
    that proves one of its groups complete, iterations back the group was committed).

    At that wait, the groups committed up to ``G t + (MMAs before w) - pending - 1`` are
    complete; MMA ``m``'s group of iteration ``t - j`` is among them for the smallest
    ``j >= ceil((g_m - before + pending + 1) / G)``.
    """
    loop = loop_stream(structure)
    mmas = _mma_positions(loop)
    per_iteration = len(mmas)
    points: dict[str, tuple[int, int]] = {}
    last_readers = {r.last_reader for r in structure.rings}
    for m in mmas:
        if loop[m].stask not in last_readers:
            continue
        best: tuple[int, int] | None = None
        for wait in group_waits(structure):
            before = sum(1 for p in mmas if p < wait.position)
            back = max(0, math.ceil((mmas.index(m) - before + wait.pending + 1) / per_iteration))
            if best is None or back < best[1]:
                best = (wait.position, back)
        if best is not None:
            points[loop[m].stask] = best
    return points


def early_tile_buffers(structure: PipelineStructure) -> dict[str, tuple[TileBuffer, ...]]:
    """For each MMA with a release point: the tile buffers only it reads in the loop, and
    nothing outside it, released with its stage of the tile's last trip."""
    loop = loop_stream(structure)
    points = release_points(structure)
    tasks = {t.name: t for t in structure.graph.stasks}
    early: dict[str, tuple[TileBuffer, ...]] = {}
    for buffer in structure.tile_buffers:
        tensor = tasks[buffer.load].output.tensor
        readers = {t.name for t in structure.graph.stasks if t.reads(tensor)}
        if len(readers) == 1 and (reader := readers.pop()) in points and any(
                i.stask == reader for i in loop):
            early[reader] = (*early.get(reader, ()), buffer)
    return early


def lead_problem(structure: PipelineStructure) -> str | None:
    """Why the skeleton cannot pipeline this loop, or None."""
    loop = loop_stream(structure)
    if not is_pipelined(structure):
        return None
    if any(i.lead > 1 for i in loop) or any(
            i.lead for r in structure.roles for i in structure.stream(r) if i.phase != "loop"):
        return "only loop sTasks one trip ahead (lead 1) are lowered"
    if not structure.warp_specialized or structure.pingpong:
        return "a pipelined loop (lead) needs a producer warp and cooperative consumers"
    if structure.inflight:
        return "a pipelined loop waits for MMA results, not for its own in-flight group"
    if any(g.pending < 0 for g in group_waits(structure)):
        return "an MMA result is read before its MMA is issued"
    kinds = {i.stask: i.kind for i in loop}
    # A stage read by math alone (a relayout) is done with once that is written.
    by_math = [r for r in structure.rings if r.first_reader == r.last_reader
               and kinds.get(r.last_reader) is not STaskKind.MMA]
    by_mma = [r for r in structure.rings if r not in by_math]
    readers = {r.last_reader for r in by_mma} | {r.first_reader for r in by_mma}
    if any(i.stask in readers and i.kind is not STaskKind.MMA for i in loop):
        return "ring stages read outside the MMA in a pipelined loop"
    points = release_points(structure)
    if set(points) != {r.last_reader for r in by_mma}:
        return "no MMA wait in the loop proves a ring's stage free"
    return None


class PipelinedLoop:
    """Writes the software-pipelined consumer loop of one output tile."""

    def __init__(self, consumers: Consumers, x0: str, trips: str) -> None:
        self.consumers = consumers
        self.k = consumers.k
        self.s = consumers.structure
        self.code = consumers.code
        self.loop = loop_stream(self.s)
        self.waits = group_waits(self.s)
        self.releases = release_points(self.s)
        self.early = early_tile_buffers(self.s)
        self.x0, self.trips = x0, trips

    def write(self) -> tuple[TileBuffer, ...]:
        """The loop; returns the tile buffers it releases (the caller releases the rest)."""
        c = self.code
        c.comment("Software-pipelined loop: " + " -> ".join(
            f"{i.stask}{'(trip+1)' if i.lead else ''}" for i in self.loop))
        c.comment("prologue: the lead sTasks of trip 0")
        self._iteration("-1", Part.PROLOGUE)
        steady = f"{self.trips} - 1"
        if self._steady_runs_once():
            c.comment("one steady trip, known when compiling: its bound is hidden, or ptxas "
                      "schedules the three parts as one block and spills (d64, 256 keys: 228 B)")
            c(f"int steady_trips = {steady};")
            c('asm volatile("" : "+r"(steady_trips));')
            steady = "steady_trips"
        with c.block(f"for (int trip = 0; trip < {steady}; ++trip)"):
            self._iteration("trip", Part.STEADY)
        c.comment("the last trip: no lead sTasks")
        with c.block(""):
            c(f"const int trip = {self.trips} - 1;")
            self._iteration("trip", Part.LAST)
        self.k.recording = True
        self._drain()
        return tuple(b for buffers in self.early.values() for b in buffers)

    def _steady_runs_once(self) -> bool:
        """Whether every tile has two trips, a constant of the kernel's text (no run-time
        size, no per-tile count): the steady loop then runs once."""
        layout = self.k.layout
        return (self.trips == self.k.hooks.trips and not layout.runtime_dims
                and self.s.graph.loop_trips() == 2)

    # ----- one iteration ---------------------------------------------------------------
    def _iteration(self, t: str, part: Part) -> None:
        k = self.k
        k.recording = part is Part.STEADY
        for position, issue in enumerate(self.loop):
            at = TripAt(f"({t} + {issue.lead})" if issue.lead else t)
            for wait in (w for w in self.waits if w.position == position):
                pending = self._pending(wait, part)
                if pending is not None:
                    self._group_wait(wait, pending)
                    self._releases_at(position, t)
            if part is not Part.PROLOGUE:
                self.consumers.turn_wait(issue.stask)
            if self._runs(issue, part):
                self._issue(issue, at)
            if part is not Part.PROLOGUE:
                self.consumers.turn_pass(issue.stask)

    @staticmethod
    def _runs(issue: Issue, part: Part) -> bool:
        """The prologue runs the lead sTasks (of trip 0), the last trip the others."""
        if part is Part.PROLOGUE:
            return bool(issue.lead)
        return part is Part.STEADY or not issue.lead

    def _commits(self, part: Part, start: int, stop: int) -> int:
        """MMA groups one iteration of ``part`` commits at stream positions [start, stop)."""
        return sum(1 for n, i in enumerate(self.loop[start:stop], start)
                   if i.kind is STaskKind.MMA and self._runs(i, part))

    def _pending(self, wait: GroupWait, part: Part) -> int | None:
        """The wait's group count in ``part``, or None where it has no reader or its
        result comes from before trip 0.

        The group is committed ``back`` iterations before the reader's; what was committed
        since depends on which iterations those were (the prologue commits only the lead
        MMAs): the count is the least over the histories the text can follow.
        """
        waiter = self.loop[wait.position]
        if not self._runs(waiter, part):
            return None
        if part is Part.PROLOGUE and waiter.lead - 1 - wait.distance < 0:
            return None  # the prologue's reader works on trip 0: the result is of trip < 0
        m = next(n for n, i in enumerate(self.loop) if i.stask == wait.mma)
        back = wait.distance - waiter.lead + self.loop[m].lead
        length = len(self.loop)
        if back == 0:
            return self._commits(part, m + 1, wait.position)
        if part is Part.PROLOGUE:
            return None
        since = (back - 1) * self._commits(Part.STEADY, 0, length) + self._commits(
            part, 0, wait.position)
        histories = [Part.STEADY] + ([Part.PROLOGUE] if self.loop[m].lead else [])
        return min(self._commits(h, m + 1, length) for h in histories) + since

    def _issue(self, issue: Issue, at: TripAt) -> None:
        c, k = self.code, self.k
        for ring in self.s.rings:
            if ring.first_reader == issue.stask:
                x = f"{self.x0} + {at.index}"
                c(f"const int {ring.stream}_stage = {ring.stage(x)};")
                c.comment(f"{ring.full_name}[stage]: {', '.join(ring.loads)} of trip "
                          f"{at.index} have landed")
                c(c.call("mbarrier_wait", ring.full(f"{ring.stream}_stage"), ring.parity(x))
                  + ";")
        k.emit_at(issue, at)
        if issue.kind is not STaskKind.MMA:  # math reads its stages synchronously
            k.release_load(issue.stask, f"{self.x0} + {at.index}")

    def _group_wait(self, wait: GroupWait, pending: int) -> None:
        c = self.code
        c.comment(f"{wait.mma}_done_for_{wait.waiter}: its group done, {pending} newer may "
                  "stay in flight")
        self.consumers.target.write_mma_wait(c, pending)
        c("#pragma unroll")
        self.k.hooks.pin(c, wait.mma)
        self.k.record.result_waits[f"{wait.mma}_done_for_{wait.waiter}"] = wait.mma
        self.k.record.mma_pending[wait.mma] = 0

    def _lead(self, stask: str) -> int:
        return next(i.lead for i in self.loop if i.stask == stask)

    def _releases_at(self, position: int, t: str) -> None:
        """Release the stages of the groups the wait at ``position`` proved complete: MMA
        ``m``'s group committed ``back`` iterations ago, of trip ``t - back + lead(m)``."""
        c = self.code
        for mma, (where, back) in self.releases.items():
            if where != position:
                continue
            trip = f"{t} + {self._lead(mma) - back}"
            with c.block(f"if ({trip} >= 0 && {trip} < {self.trips})"):
                self.k.release_load(mma, f"{self.x0} + {trip}")
                self._release_buffers(mma, trip)

    def _release_buffers(self, mma: str, trip: str) -> None:
        """The tile buffers only ``mma`` reads, once it is done with the tile's last trip."""
        c = self.code
        for buffer in self.early.get(mma, ()):
            with c.block(f"if ({trip} == {self.trips} - 1)"):
                c.comment(f"{buffer.empty_name}: this warp is done with the tile's "
                          f"{buffer.load} (its last {mma})")
                c(c.call("mbarrier_arrive_warp", buffer.empty(), "lane") + ";")

    def _drain(self) -> None:
        """After the loop: wait for every group, release the stages still held: trips
        after the one released by the last iteration (``t - back + lead``, or one less
        where the last iteration has no such wait)."""
        c = self.code
        self.consumers.target.write_mma_wait(c, 0)
        for issue in self.loop:
            if issue.kind is STaskKind.MMA:
                c("#pragma unroll")
                self.k.hooks.pin(c, issue.stask)
        for mma, (where, back) in self.releases.items():
            waits_last = any(self._pending(w, Part.LAST) is not None
                             for w in self.waits if w.position == where)
            first = f"{self.trips} - {back - self._lead(mma) + (0 if waits_last else 1)}"
            c("#pragma unroll 1")
            with c.block(f"for (int held = max({first}, 0); held < {self.trips}; ++held)"):
                self.k.release_load(mma, f"{self.x0} + held")
                self._release_buffers(mma, "held")
