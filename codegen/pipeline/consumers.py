"""The consumer warpgroups' part of a kernel: per unit of work, a tile's prologue, its main
loop (each role's stream once a trip: the waits it is the waiter of, the sTask through the
emitter table, its turn on the tensor cores, its MMA wait and its releases; or the
software-pipelined loop), then the epilogue; cooperative consumers share a tile, pingpong
ones own one each."""

from __future__ import annotations

from typing import TYPE_CHECKING

from codegen.pipeline import split_k, stream_k
from codegen.pipeline.limits import WARPGROUP
from codegen.pipeline.pipelined import PipelinedLoop, TripAt, is_pipelined
from codegen.pipeline.record import EmittedTurn
from codegen.pipeline.structure import Issue, Ring, TileBuffer
from codegen.pipeline.writer import RoleWriter
from scheduler_search.ir import STaskKind

if TYPE_CHECKING:
    from codegen.pipeline.skeleton import PipelineSkeleton


class Consumers(RoleWriter):
    """Writes the consumer warpgroups' walk of their streams."""

    def __init__(self, k: PipelineSkeleton) -> None:
        super().__init__(k)
        #: Loads to reissue (no producer) once the trip's turn passes are written.
        self._refills: list[tuple[Ring, str, str]] = []
        self._pass_pending = False

    def write(self) -> None:
        """The consumers' state, their units of work, and what the block owes before it
        exits (the last turn's hand-over, the output's TMA stores)."""
        c, s, lay = self.code, self.structure, self.layout
        if lay.tma_store or lay.stream_k is not None or lay.split_blocks > 1:
            c(f"const int thread_in_wg = threadIdx.x % {WARPGROUP};")
        if lay.split_blocks > 1:
            whose = "every block's share" if split_k.scattered(lay) else "the first block"
            c(f"u32 split_round = 0;  // tiles whose sums met in {whose}")
        self.hooks.consumer_state(c)
        c("int loads_before = 0;  // loads of this block's sequence before the current unit")
        if lay.staging == "ring" and not s.pingpong:
            c("int store_round = 0;  // sub-tiles stored so far (ring slot = store_round % 2)")
        if s.turns:
            c("bool first_turn = true;")
        if s.tile_buffers:
            c("u32 tile_phase = 0;  // flips at each output tile of this block")
        if not s.warp_specialized:
            self.k.loader.load_ahead()
        with self.k.tiles.units():
            if s.pingpong:
                self._pingpong_unit()
            else:
                self._cooperative_unit()
        if s.turns:
            c.comment("turn: take the last hand-over, so no named-barrier arrival is left over "
                      "(none where the block had no tile: fewer tiles than blocks at a "
                      "run-time size)")
            with c.block("if (consumer == 0 && !first_turn)"):
                c(c.call("named_barrier_sync", self.layout.bar_turn0, 2 * WARPGROUP) + ";")
        if lay.tma_store:
            with c.block("if (thread_in_wg == 0)"):
                c(c.call("tma_store_wait<0>") + ";  // the output written before the block exits")

    def _cooperative_unit(self) -> None:
        c = self.code
        c("const int tile = unit;")
        self.k.tiles.origins("tile")
        c("const int row0 = consumer * CONSUMER_ROWS;  // this warpgroup's rows")
        trips = self.k.tiles.trips()
        c("const int x0 = loads_before;")
        c(f"loads_before += {trips};")
        self.hooks.begin_tile(c)
        self._tile_buffers_acquire()
        self._prologue()
        self._tile_buffers_release(held=False)
        released: tuple[TileBuffer, ...] = ()
        if is_pipelined(self.structure):
            released = PipelinedLoop(self, "x0", trips).write()
        else:
            self._mainloop("x0", trips, turns_per_trip=True)
        self._tile_buffers_release(held=True, released=released)
        if self.structure.tile_buffers:
            c("tile_phase ^= 1;")
        if self.layout.split_blocks > 1:
            stores = split_k.emit_sum(c, self.layout)
            if stores is None:
                self._epilogue()
                return
            with c.block(f"if ({stores})"):
                self._epilogue()
            return
        if self.layout.stream_k is None:
            self._epilogue()
            return
        stream_k.emit_fixup(c, self.hooks.trips, self.layout.output.fragment,
                           self.layout.stream_k_part_floats,
                           clustered=self.structure.cluster_size > 1)
        with c.block("if (store_tile)"):
            self._epilogue()

    def _prologue(self) -> None:
        """The consumers' sTasks once per output tile, before the loop (Mamba2's state
        term on the tile buffers): an MMA is waited for at once, as what follows reads it."""
        c, s = self.code, self.structure
        for issue in s.compute_stream(s.consumer_roles[0]):
            if issue.phase != "prologue":
                continue
            self.k.emit_at(issue, TripAt("0"))
            if issue.kind is STaskKind.MMA:
                self.target.write_mma_wait(c, 0)
                c("#pragma unroll")
                self.hooks.pin(c, issue.stask)

    def _tile_buffers_acquire(self, owner: str = "0") -> None:
        """Without a producer, the loader loads this tile's buffers; every consumer waits
        for them (pingpong: its ``owner`` copy)."""
        c, s = self.code, self.structure
        if not s.tile_buffers:
            return
        if not s.warp_specialized:
            with c.block(f"if ({self.target.loader_guard()})"):
                for buffer in s.tile_buffers:
                    c(self.k.loader.tile_load_call(buffer, "tile_phase ^ 1"))
            c("__syncwarp();")
        for buffer in s.tile_buffers:
            c.comment(f"{buffer.full_name}: this tile's {buffer.load} has landed")
            c(c.call("mbarrier_wait", buffer.full(owner), "tile_phase") + ";")

    def _tile_buffers_release(self, *, held: bool, owner: str = "0",
                              released: tuple[TileBuffer, ...] = ()) -> None:
        """Release the tile buffers the loop reads (``held``) or those it does not, but
        those the loop ``released`` itself."""
        c = self.code
        for buffer in self.structure.tile_buffers:
            if self.hooks.holds_tile_buffer(buffer.load) != held or buffer in released:
                continue
            c.comment(f"{buffer.empty_name}: this warp is done with the tile's {buffer.load}")
            c(c.call("mbarrier_arrive_warp", buffer.empty(owner), "lane") + ";")

    def _pingpong_unit(self) -> None:
        c, s = self.code, self.structure
        c("const int tile = unit * OWNERS + consumer;")
        c("const int unit_tiles = TILES - unit * OWNERS < OWNERS ? TILES - unit * OWNERS : OWNERS;")
        if self.hooks.tile_trips() is None:
            trips = self.hooks.trips
            c(f"const int x0 = loads_before + consumer * {trips};  // after earlier owners")
            c(f"loads_before += unit_tiles * {trips};")
            self.k.tiles.origins("tile", guarded=True)
        else:
            self._owners_loads_before()
            self.k.tiles.origins("tile", guarded=True)
            trips = self.k.tiles.trips()
        c("const int row0 = 0;")
        self.hooks.begin_tile(c)
        mmas = [i for i in self._loop() if i.kind is STaskKind.MMA]
        for turn in s.turns:
            if turn.waiter == mmas[0].stask:
                self.turn_wait(turn.waiter)
                break
        with c.block("if (tile < TILES)"):
            self._tile_buffers_acquire(owner="consumer")
            self._prologue()
            self._tile_buffers_release(held=False, owner="consumer")
            self._mainloop("x0", trips, turns_per_trip=False)
            self._tile_buffers_release(held=True, owner="consumer")
        if s.tile_buffers:
            c("tile_phase ^= 1;  // this owner's copy: once a unit")
        self.turn_pass(mmas[-1].stask)
        with c.block("if (tile < TILES)"):
            self._epilogue()

    def _owners_loads_before(self) -> None:
        """``x0``: the loads of the block's sequence before this owner's tile (earlier units
        and the earlier owners' tiles of this one, whose trips differ: causal tiles); then
        ``loads_before`` past the unit."""
        c = self.code
        names = ", ".join(a.origin for a in self.hooks.grid_axes)
        c("int x0 = loads_before, unit_loads = 0;")
        with c.block("for (int owner = 0; owner < unit_tiles; ++owner)"):
            c(f"int {names};")
            c(f"tile_origin(unit * OWNERS + owner, {names});")
            c(f"const int owner_trips = {self.hooks.tile_trips()};")
            c("if (owner < consumer) x0 += owner_trips;  // after earlier owners")
            c("unit_loads += owner_trips;")
        c("loads_before += unit_loads;")

    def _loop(self) -> list[Issue]:
        role = self.structure.consumer_roles[0]
        return [i for i in self.structure.compute_stream(role) if i.phase == "loop"]

    def _mainloop(self, x0: str, trips: str, *, turns_per_trip: bool) -> None:
        """One trip of the consumers' loop stream per iteration of the reduction."""
        c, s = self.code, self.structure
        loop = self._loop()
        c.comment(f"Main loop: {' -> '.join(i.stask for i in loop)}, one trip per iteration.")
        names = [i.stask for i in loop]
        passes = {t.after for t in s.turns} if turns_per_trip else set()
        with c.block(f"for (int trip = 0; trip < {trips}; ++trip)"):
            c(f"const int x = {x0} + trip;")
            for index, issue in enumerate(loop):
                self._pass_pending = any(n in passes for n in names[index + 1 :])
                for ring in s.rings:
                    if ring.first_reader == issue.stask:
                        c(f"const int {ring.stream}_stage = {ring.stage('x')};")
                        c.comment(f"{ring.full_name}[stage]: {', '.join(ring.loads)} of this "
                                  "stage have landed")
                        c(c.call("mbarrier_wait", ring.full(f"{ring.stream}_stage"),
                                 ring.parity("x")) + ";")
                if turns_per_trip:
                    self.turn_wait(issue.stask)
                self.k.emit(s.consumer_roles, issue)
                if turns_per_trip:
                    self.turn_pass(issue.stask)
                if not self._pass_pending:
                    self._flush_refills()
                if issue.kind is STaskKind.MMA:
                    self._mma_wait(issue, "x", "trip")
                else:
                    # Register math reads its stage synchronously: done once it is written.
                    self._release(issue.stask, "x")
        self._pass_pending = False
        for issue in loop:
            if issue.kind is STaskKind.MMA and s.inflight.get(issue.stask):
                self.target.write_mma_wait(c, 0)
                c("#pragma unroll")
                self.hooks.pin(c, issue.stask)
                self._release(issue.stask, f"{x0} + {trips} - 1")

    def _mma_wait(self, issue: Issue, x: str, trip: str) -> None:
        """Wait for the MMA groups the sProgram does not leave in flight, then release
        the stages whose last reader they were."""
        c = self.code
        pending = self.structure.inflight.get(issue.stask, 0)
        self.record.mma_pending[issue.stask] = pending
        if pending:
            c.comment(f"{issue.stask}_inflight: keep this {self.target.mma_name} group in "
                      "flight; the previous one is done")
        self.target.write_mma_wait(c, pending)
        c("#pragma unroll")
        self.hooks.pin(c, issue.stask)
        if not pending:
            for wait in self.structure.result_waits():
                if wait.deps[0][0] == issue.stask:
                    self.record.result_waits[wait.name] = issue.stask
        if pending:
            with c.block(f"if ({trip} >= {pending})"):
                self._release(issue.stask, f"{x} - {pending}", guard=f"{trip} >= {pending}")
        else:
            self._release(issue.stask, x)

    def _release(self, stask: str, x: str, guard: str = "") -> None:
        """``empty`` arrivals of the rings ``stask`` reads last, for load ``x``; without a
        producer, the load that reuses the slot (deferred past the trip's last turn pass:
        it waits for every consumer's release, and a later consumer cannot release before
        it has had its turn)."""
        s = self.structure
        for ring in s.rings:
            if ring.last_reader != stask:
                continue
            self.k.release_stage(ring, x)
            if not s.warp_specialized:
                # A deferred refill is written outside the block that guards the release.
                self._refills.append((ring, x, guard if self._pass_pending else ""))
        if not self._pass_pending:
            self._flush_refills()

    def _flush_refills(self) -> None:
        c = self.code
        for ring, x, guard in self._refills:
            cond = f"{guard} && " if guard else ""
            c(f"if ({cond}{self.target.loader_guard()} && ({x}) + {ring.const}_STAGES < "
              "block_loads) "
              f"load_ahead_{ring.stream}(({x}) + {ring.const}_STAGES);")
            c("__syncwarp();")
        self._refills.clear()

    def turn_wait(self, stask: str) -> None:
        """Wait for this warpgroup's turn on the tensor cores before ``stask``."""
        c, lay = self.code, self.layout
        turns = [t for t in self.structure.turns if t.waiter == stask]
        if not turns:
            return
        first = next(t for t in turns if t.distance > 0)
        c.comment(f"{', '.join(t.name for t in turns)}: wait until the previous consumer "
                  "warpgroup hands over the tensor cores")
        c(f"if (consumer != {self.structure.consumer_roles.index(first.to_role)} || !first_turn) "
          + c.call("named_barrier_sync", f"{lay.bar_turn0} + consumer", 2 * WARPGROUP) + ";")
        c("first_turn = false;")
        for turn in turns:
            index = self.structure.consumer_roles.index(turn.to_role)
            self.record.turns[turn.name] = EmittedTurn(
                turn.name, lay.bar_turn0 + index, turn.to_role, turn.from_role, stask)

    def turn_pass(self, stask: str) -> None:
        """Hand the tensor cores to the next consumer warpgroup after ``stask``."""
        c = self.code
        turns = [t for t in self.structure.turns if t.after == stask]
        if not turns:
            return
        c.comment(f"{', '.join(t.name for t in turns)}: hand the tensor cores to the next "
                  "consumer warpgroup")
        c(c.call("named_barrier_arrive", f"{self.layout.bar_turn0} + (consumer + 1) % CONSUMERS",
                 2 * WARPGROUP) + ";")

    def _epilogue(self) -> None:
        s = self.structure
        for issue in s.compute_stream(s.consumer_roles[0]):
            if issue.phase == "epilogue":
                self.k.emit(s.consumer_roles, issue)
