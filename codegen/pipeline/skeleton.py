"""The pipeline skeleton: one warp-specialised Hopper kernel, written by walking an sProgram.

The skeleton writes what every kernel of the space shares and asks the operator's
:class:`~codegen.pipeline.hooks.OperatorHooks` for the rest. Its walk:

- the *loader* role (the producer warp, or without warp specialisation the first
  consumer's thread 0, STAGES loads ahead) issues its stream's loads through one device
  function per ring: wait ``empty[s]``, arm ``full[s]`` with the stage's bytes, then each
  load sTask through :data:`EMITTERS`;
- each *consumer* warpgroup walks its stream once per loop trip: before an sTask, the
  waits whose waiter it is (``full[s]`` of the rings it reads first, its turn on the
  tensor cores); the sTask through :data:`EMITTERS`; after it, the turn it passes, its
  wgmma wait (one group left in flight where the sProgram says so) and the release
  (``empty[s]``) of the rings it reads last; then the epilogue's sTasks;
- around them: shared-memory plan, barrier initialisation, role dispatch with setmaxnreg
  budgets, the tile loop (persistent or one unit per block) and its raster.

Every emitter appends to an :class:`~codegen.pipeline.record.EmissionRecord`, the
kernel's structure as written, which tests hold against the sProgram.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from codegen.cuda import prelude
from codegen.cuda.mbarrier import MBARRIER_BYTES
from codegen.pipeline import epilogue, stream_k
from codegen.pipeline.code import Code
from codegen.pipeline.emitters import EMITTERS
from codegen.pipeline.hooks import OperatorHooks
from codegen.pipeline.layout import PipelineLayout
from codegen.pipeline.limits import REGISTER_FILE, WARP, WARPGROUP
from codegen.pipeline.pipelined import PipelinedLoop, TripAt, is_pipelined
from codegen.pipeline.raster import emit_tile_origin
from codegen.pipeline.record import EmissionRecord, EmittedIssue, EmittedRing, EmittedTurn
from codegen.pipeline.smem import SMEM_ALIGN
from codegen.pipeline.structure import Issue, Ring, TileBuffer
from scheduler_search.ir import STaskKind


class PipelineSkeleton:
    """Writes the kernel of one sProgram with one operator's hooks.

    Args:
        layout: the plan (structure, hooks, device); :meth:`PipelineLayout.problem` must
            be None.
        entry: the kernel's name.
    """

    def __init__(self, layout: PipelineLayout, entry: str) -> None:
        self.layout = layout
        self.structure = layout.structure
        self.hooks: OperatorHooks = layout.hooks
        self.entry = entry
        self.code = Code()
        self.record = EmissionRecord()
        #: Loads to reissue (no producer) once the trip's turn passes are written.
        self._refills: list[tuple[Ring, str, str]] = []
        self._pass_pending = False
        #: The trip the sTask being written works on (a pipelined loop's lead sTasks
        #: work on the next one).
        self.at = TripAt()
        #: Off while a pipelined loop writes its prologue and last trip: the record holds
        #: each role's stream once, as the loop's steady trips issue it.
        self.recording = True
        #: Epilogue math sTasks waiting for the store that applies them pair by pair.
        self.element_math: list[str] = []

    # ----- lookups -------------------------------------------------------------------
    def ring_of(self, stask: str) -> Ring | None:
        """The ring a load sTask fills, or None for a tile loaded once per output tile."""
        return next((r for r in self.structure.rings if stask in r.loads), None)

    def readers_of(self, ring: Ring) -> set[str]:
        """The sTasks that read a ring's stage (from its first to its last reader)."""
        names = [i.stask for i in self.structure.compute_stream(self.structure.consumer_roles[0])]
        first, last = names.index(ring.first_reader), names.index(ring.last_reader)
        return set(names[first : last + 1])

    def _emit(self, roles: tuple[str, ...], issue: Issue) -> None:
        """Write ``issue`` once for ``roles`` (the consumer warpgroups run one text)."""
        EMITTERS[(issue.kind, issue.unit)](self, roles, issue)

    def emit_at(self, issue: Issue, at: TripAt) -> None:
        """Write ``issue`` for the consumers, working on trip ``at``."""
        self.at = at
        self._emit(self.structure.consumer_roles, issue)
        self.at = TripAt()

    def release_load(self, stask: str, x: str) -> None:
        """``empty`` arrivals, for load ``x``, of the rings whose last reader is ``stask``
        (with a producer warp: nothing to reissue)."""
        for ring in self.structure.rings:
            if ring.last_reader == stask:
                self.release_stage(ring, x)

    def release_stage(self, ring: Ring, x: str) -> None:
        """This warp's ``empty`` arrival for the stage of load ``x``: on its own block's
        barrier, or on every block's of the cluster where they all multicast into it."""
        c = self.code
        c.comment(f"{ring.empty_name}: this warp is done with the stage of load {x}")
        empty = ring.empty(ring.stage(x))
        if ring.cluster_blocks > 1:
            c(c.call("mbarrier_arrive_cluster_warp", empty, "lane", "CLUSTER") + ";")
        else:
            c(c.call("mbarrier_arrive_warp", empty, "lane") + ";")

    def recorded(self, roles: tuple[str, ...], issue: Issue, stage: str) -> None:
        if not self.recording:
            return
        for role in roles:
            self.record.issue(role, EmittedIssue(issue.stask, issue.unit, issue.phase, stage))

    # ----- the whole source ----------------------------------------------------------
    def source(self) -> str:
        self._constants()
        self._ring_helpers()
        if not self.layout.runtime_axes:  # else in the kernel, after the sizes
            self._tile_helpers()
        for buffer in self.structure.tile_buffers:
            self._tile_load_function(buffer)
        for ring in self.structure.rings:
            self._load_function(ring)
        self._kernel()
        return self._header() + "\n" + prelude(self.code.uses) + "\n" + self.code.text()

    def _tile_helpers(self) -> None:
        """``tile_origin`` and stream-K's share: functions at file scope, or lambdas in
        the kernel where they read sizes counted there."""
        in_kernel = bool(self.layout.runtime_axes)
        emit_tile_origin(self.code, self.hooks.grid_axes, self.structure.raster,
                         self.structure.sprogram.cluster, in_kernel=in_kernel)
        if self.layout.stream_k is not None:
            stream_k.emit_helpers(self.code, self.hooks.trips, in_kernel=in_kernel,
                                  clustered=self.structure.cluster_size > 1)

    def _runtime_sizes(self) -> None:
        """The grid of tiles counted from the size arguments, then the helpers that read
        it (one compiled kernel serves every size of its range)."""
        c, s, lay = self.code, self.structure, self.layout
        if not lay.runtime_dims:
            return
        names = ", ".join(self.hooks.size_arg(d) for d in lay.runtime_dims)
        verb = "is an argument" if len(lay.runtime_dims) == 1 else "are arguments"
        counted = ": the grid of tiles and the units" if lay.runtime_axes else ""
        c.comment(f"Run-time sizes ({names} {verb}){counted}.")
        self.hooks.runtime_constants(c)
        if not lay.runtime_axes:
            c("")
            return
        cluster_axis = s.sprogram.cluster.axis if s.cluster_size > 1 else None
        for axis in lay.runtime_axes:
            tiles = f"({axis.runtime_extent} + {axis.tile - 1}) / {axis.tile}"
            if axis.name == cluster_axis:
                # Whole clusters: a last cluster's block past the size has its origin
                # pulled back inside it (``tile_origin``), computes the last rows again
                # and stores what its partner stores, and still shares its slices of
                # the other operand with the blocks inside the size.
                c(f"const int TILES_{axis.const} = ({tiles} + CLUSTER - 1) / CLUSTER * "
                  "CLUSTER;  // whole clusters")
            else:
                c(f"const int TILES_{axis.const} = {tiles};")
        count = " * ".join(f"TILES_{a.const}" for a in self.hooks.grid_axes)
        cluster = " / CLUSTER" if s.cluster_size > 1 else ""
        c(f"const int TILES = {count}{cluster};")
        c("const int UNITS = (TILES + OWNERS - 1) / OWNERS;")
        if lay.stream_k is not None:
            stream_k.emit_runtime_share(c, self.hooks.trips)
        self._tile_helpers()

    def _header(self) -> str:
        s, lay = self.structure, self.layout
        sp = s.sprogram
        axes = "x".join(f"{a.tile}" for a in self.hooks.grid_axes)
        stages = ", ".join(f"{r.stream}={r.depth}" for r in s.rings)
        lines = [
            f"// pipetune: {self.hooks.header()}",
            f"// schedule {sp.hash}",
            f"// output tile {axes}, stages {stages}, {sp.consumer_split}, raster "
            f"{sp.raster.major}/{sp.raster.swizzle}, "
            + ("persistent" if s.persistent else "one unit per block")
            + f", epilogue {lay.store_unit.value} ({lay.staging})",
            "// warp roles: "
            + (f"producer warpgroup (1 TMA warp, {sp.roles.producer_regs} regs) + "
               if s.warp_specialized else f"no producer ({s.loader} thread 0 loads ahead) + ")
            + f"{s.consumers} consumer warpgroup(s) ({sp.roles.consumer_regs} regs)",
        ]
        for role in s.roles:
            stream = " -> ".join(f"{i.stask}@{i.unit.value}" for i in s.stream(role))
            lines.append(f"//   {role}: {stream}")
        for barrier in sp.barriers:
            deps = ", ".join(f"{d}-{dist}" if dist else d for d, dist in barrier.deps)
            lines.append(f"//   barrier {barrier.name} ({barrier.kind}, {barrier.slots} slot(s)): "
                         f"{barrier.waiter} waits for {deps}")
        return "\n".join(lines) + "\n"

    # ----- constants -----------------------------------------------------------------
    def _constants(self) -> None:
        c, s, lay = self.code, self.structure, self.layout
        c.use("types")
        c.comment("The grid of output tiles, the units of work and the consumer warpgroups.")
        if lay.runtime_axes:
            tiles = ", ".join(f"TILES_{a.const} = {a.tiles}" for a in self.hooks.grid_axes
                              if not a.runtime)
            if tiles:
                c(f"constexpr int {tiles};  // the other axes' tiles are counted at run time")
        else:
            tiles = ", ".join(f"TILES_{a.const} = {a.tiles}" for a in self.hooks.grid_axes)
            c(f"constexpr int {tiles}, TILES = {lay.tiles};")
        c(f"constexpr int CONSUMERS = {s.consumers};  // consumer warpgroups")
        c(f"constexpr int OWNERS = {s.owners};  // tiles per unit (pingpong: one per consumer)")
        if not lay.runtime_axes:
            c(f"constexpr int UNITS = {lay.units};")
        c(f"constexpr int CONSUMER_ROWS = {lay.consumer_rows};  // tile rows one consumer owns")
        if s.cluster_size > 1:
            axis = s.sprogram.cluster.axis
            c(f"constexpr int CLUSTER = {s.cluster_size};  // blocks per cluster, neighbours "
              f"along {axis}; units count clusters")
            along = next((a for a in self.hooks.grid_axes if a.name == axis), None)
            if along is not None and not along.runtime:  # else its tiles run past the grid
                c(f'static_assert(TILES_{along.const} % CLUSTER == 0, "clusters cover whole '
                  f'tiles along {axis}");')
        c("")
        self.hooks.constants(c, lay.consumer_rows)
        if lay.stream_k is not None:
            stream_k.emit_constants(c, lay)
        for ring in s.rings:
            c(f"constexpr int {ring.const}_STAGES = {ring.depth};  // {ring.stream} ring depth")
            c(f"constexpr u32 {ring.const}_TX_BYTES = {lay.stage_bytes(ring)};  // "
              f"{' + '.join(ring.loads)} bytes of one stage")
        c("")
        c.comment("Shared memory, from the 1024-byte aligned base.")
        for name, offset in lay.smem.offsets.items():
            c(f"constexpr u32 SMEM_{name} = {offset};")
        c(f"constexpr u32 SMEM_BYTES = {lay.smem.total_bytes};")
        if lay.tma_store:
            epilogue.store_constants(c, lay)
        c("")
        self._static_asserts()

    def _static_asserts(self) -> None:
        c, s, lay = self.code, self.structure, self.layout
        c(f"static_assert(SMEM_BYTES + {SMEM_ALIGN} <= {lay.device.smem_per_block_bytes}, "
          '"shared memory budget (with alignment slack)");')
        for ring in s.rings:
            parts = " + ".join(f"{self.hooks.operand(t).const}_STAGE_BYTES" for t in ring.loads)
            c(f'static_assert({ring.const}_TX_BYTES == {parts}, "{ring.stream} stage bytes");')
        for axis in self.hooks.grid_axes:
            if not axis.runtime:
                c(f"static_assert(TILES_{axis.const} * {axis.tile} >= {axis.extent}, "
                  f'"the tiles cover {axis.name}");')
        if lay.runtime_axes:
            c(f"static_assert(CONSUMER_ROWS * (OWNERS > 1 ? 1 : CONSUMERS) == "
              f'{lay.output.rows}, "rows cover the tiles");')
        else:
            c(f'static_assert(UNITS * OWNERS >= TILES && CONSUMER_ROWS * '
              f'(OWNERS > 1 ? 1 : CONSUMERS) == {lay.output.rows}, '
              '"units and rows cover the tiles");')
        if s.warp_specialized:
            roles = s.sprogram.roles
            c(f"constexpr int PRODUCER_REGS = {roles.producer_regs}, "
              f"CONSUMER_REGS = {roles.consumer_regs};  // setmaxnreg")
            c(f"static_assert(128 * (PRODUCER_REGS + CONSUMERS * CONSUMER_REGS) <= "
              f'{REGISTER_FILE}, "register file");')
        c("")

    def _ring_helpers(self) -> None:
        c = self.code
        c.comment("The rings' barriers: full[s] completes when stage s has landed, empty[s] "
                  "when its readers released it.")
        names = [n for r in self.structure.rings for n in (r.full_name, r.empty_name)]
        names += [n for t in self.structure.tile_buffers for n in (t.full_name, t.empty_name)]
        for name in names:
            c(f"__device__ __forceinline__ u32 {name}(u32 smem, int stage) {{ return smem + "
              f"SMEM_{name.upper()} + {MBARRIER_BYTES} * stage; }}")
        c("")

    # ----- the loader's work: one stage of a ring ------------------------------------
    def _load_params(self, ring: Ring) -> list[str]:
        maps = dict.fromkeys(self.hooks.tensor_map(t) for t in ring.loads)
        return [f"const TensorMap* {m}" for m in maps]

    def _load_function(self, ring: Ring) -> None:
        c, s = self.code, self.structure
        origins = ", ".join(f"int {a.origin}" for a in self.hooks.grid_axes)
        c.comment(f"One stage of the {ring.stream} stream: wait for the slot, then "
                  + ", ".join(ring.loads) + " into it.")
        head = (f"__device__ __forceinline__ void load_{ring.stream}(int stage, u32 empty_parity, "
                f"{origins}, int trip, u32 smem, {', '.join(self._load_params(ring))})")
        with c.block(head):
            if ring.cluster_blocks > 1:
                c("const u32 cta_rank = " + c.call("cluster_ctarank") + ";  // its slices")
            c(f"const u32 full = {ring.full('stage')};")
            c.comment(f"{ring.empty_name}[stage]: the consumers released the slot "
                      f"({ring.last_reader}, {ring.const}_STAGES trips ago)")
            c(c.call("mbarrier_wait", ring.empty("stage"), "empty_parity") + ";")
            c(c.call("mbarrier_arrive_expect_tx", "full", f"{ring.const}_TX_BYTES") + ";")
            for issue in s.load_stream(ring.loader):
                if issue.stask in ring.loads:
                    self._emit((ring.loader,), issue)
        c("")

    def _tile_load_function(self, buffer: TileBuffer) -> None:
        c, s = self.code, self.structure
        tile = self.hooks.operand(buffer.load)
        tmap = self.hooks.tensor_map(buffer.load)
        origins = ", ".join(f"int {a.origin}" for a in self.hooks.grid_axes)
        c.comment(f"{buffer.load}, once per output tile: wait until the consumers released the "
                  "previous tile's copy, then load it.")
        head = (f"__device__ __forceinline__ void load_tile_{buffer.load}(u32 empty_parity, "
                f"{origins}, u32 smem, const TensorMap* {tmap})")
        with c.block(head):
            c(f"const u32 full = {buffer.full()};")
            c(c.call("mbarrier_wait", buffer.empty(), "empty_parity") + ";")
            c(c.call("mbarrier_arrive_expect_tx", "full", f"{tile.const}_STAGE_BYTES") + ";")
            issue = next(i for i in s.load_stream(buffer.loader) if i.stask == buffer.load)
            self._emit((buffer.loader,), issue)
        c("")

    def _tile_load_call(self, buffer: TileBuffer, parity: str) -> str:
        origins = ", ".join(a.origin for a in self.hooks.grid_axes)
        tmap = self.hooks.tensor_map(buffer.load)
        return f"load_tile_{buffer.load}({parity}, {origins}, smem, &{tmap});"

    def _load_call(self, ring: Ring, stage: str, parity: str, trip: str) -> str:
        origins = ", ".join(a.origin for a in self.hooks.grid_axes)
        maps = ", ".join(f"&{m}" for m in dict.fromkeys(
            self.hooks.tensor_map(t) for t in ring.loads))
        return f"load_{ring.stream}({stage}, {parity}, {origins}, {trip}, smem, {maps});"

    # ----- the kernel ----------------------------------------------------------------
    def _kernel(self) -> None:
        c, s, lay = self.code, self.structure, self.layout
        params = [f"const __grid_constant__ TensorMap {m.name}" for m in self.hooks.tensor_maps()]
        out = lay.output
        if lay.tma_store:
            params.append(f"const __grid_constant__ TensorMap {out.map_name}")
        else:
            params.append(f"{out.ctype}* __restrict__ {out.tensor}")
        params += [f"float* __restrict__ {name}" for name in self.hooks.side_outputs()]
        params += [f"const {lay.pointer_type(name)}* __restrict__ {name}"
                   for name in self.hooks.pointer_inputs()]
        if lay.stream_k is not None:
            params.append(f"unsigned char* __restrict__ {stream_k.WORKSPACE}")
        params += [f"const int {self.hooks.size_arg(d)}" for d in lay.runtime_dims]
        cluster = f"__cluster_dims__({s.cluster_size}, 1, 1) " if s.cluster_size > 1 else ""
        c(f'extern "C" __global__ void {cluster}__launch_bounds__({s.threads}, 1)')
        with c.block(f"{self.entry}({', '.join(params)})"):
            c("extern __shared__ __align__(1024) unsigned char smem_raw[];")
            c(f"const u32 smem = ({c.call('smem_u32', 'smem_raw')} + 1023u) & ~1023u;")
            c(f"const int warpgroup = threadIdx.x / {WARPGROUP};")
            c(f"const int warp = (threadIdx.x / {WARP}) % 4, lane = threadIdx.x % {WARP};")
            if s.cluster_size > 1:
                c("const int cluster_id = blockIdx.x / CLUSTER, clusters = gridDim.x / CLUSTER;")
            c("")
            self._runtime_sizes()
            self._init_rings()
            if s.warp_specialized:
                with c.block("if (warpgroup == 0)"):
                    self._producer()
                with c.block("else"):
                    c(c.call("setmaxnreg_inc<CONSUMER_REGS>") + ";")
                    for role in s.consumer_roles:
                        self.record.register_budgets[role] = s.sprogram.roles.consumer_regs
                    c("const int consumer = warpgroup - 1;")
                    self._consumer()
            else:
                c("const int consumer = warpgroup;")
                self._consumer()
            if s.cluster_size > 1:
                c.comment("no block exits while a peer may still arrive on its barriers")
                c(c.call("cluster_sync") + ";")
        c("")

    def _init_rings(self) -> None:
        c = self.code
        with c.block("if (threadIdx.x == 0)"):
            for ring in self.structure.rings:
                whose = " of each block of the cluster" if ring.cluster_blocks > 1 else ""
                c.comment(f"{ring.full_name}[s]: 1 arrival (+ TMA bytes); {ring.empty_name}[s]: "
                          f"{ring.empty_arrivals} arrivals (one per reading consumer warp"
                          f"{whose}).")
                with c.block(f"for (int s = 0; s < {ring.const}_STAGES; ++s)"):
                    c(c.call("mbarrier_init", ring.full("s"), 1) + ";")
                    c(c.call("mbarrier_init", ring.empty("s"), ring.empty_arrivals) + ";")
                self.record.rings[ring.stream] = EmittedRing(
                    ring.stream, ring.full_name, ring.empty_name, ring.depth, 1,
                    ring.empty_arrivals, self.layout.stage_bytes(ring))
            for buffer in self.structure.tile_buffers:
                c.comment(f"{buffer.full_name}: 1 arrival (+ TMA bytes); {buffer.empty_name}: "
                          f"{buffer.empty_arrivals} arrivals (the reading consumer warps).")
                c(c.call("mbarrier_init", buffer.full(), 1) + ";")
                c(c.call("mbarrier_init", buffer.empty(), buffer.empty_arrivals) + ";")
                self.record.tile_buffers[buffer.load] = (buffer.full_name, buffer.empty_name)
            c(c.call("mbarrier_init_fence") + ";")
        if self.structure.cluster_size > 1:
            c.comment("every block's barriers are initialised before any block multicasts")
            c(c.call("cluster_sync") + ";")
        else:
            c("__syncthreads();")
        c("")

    @contextmanager
    def _units(self) -> Iterator[None]:
        """The block's units of work: strided over the grid (persistent; snaking over it when
        tiles differ in trips) or its own."""
        c = self.code
        # A cluster's blocks work on one unit together.
        block, blocks = (("cluster_id", "clusters") if self.structure.cluster_size > 1
                         else ("blockIdx.x", "gridDim.x"))
        if self.layout.stream_k is not None:
            with stream_k.units(c, self.hooks.trips, block):
                yield
        elif self.structure.persistent and self.hooks.tile_trips() is not None:
            c.comment("tiles of unequal trips: every other wave of units in reverse block "
                      "order, so that a block's tiles alternate heavy and light (strided over "
                      "an even grid, a causal raster's l-first pairs give a block one kind)")
            with c.block(f"for (int wave = 0; wave * (int){blocks} < UNITS; ++wave)"):
                c(f"const int unit = wave * {blocks} "
                  f"+ (wave & 1 ? {blocks} - 1 - {block} : {block});")
                c("if (unit >= UNITS) break;  // the last wave is partial")
                yield
        elif self.structure.persistent:
            with c.block(f"for (int unit = {block}; unit < UNITS; unit += {blocks})"):
                yield
        else:
            c.comment("one unit per block" if block == "blockIdx.x"
                      else "one unit per cluster")
            with c.block(""):
                c(f"const int unit = {block};")
                yield

    def _trips(self) -> str:
        """The current tile's loop trips: a constant, or ``trips`` declared here."""
        if self.layout.stream_k is not None:
            return "unit_trips"
        expr = self.hooks.tile_trips()
        if expr is None:
            return self.hooks.trips
        self.code(f"const int trips = {expr};  // loop trips of this tile")
        return "trips"

    def _prefetch_maps(self) -> None:
        c = self.code
        for tmap in self.hooks.tensor_maps():
            c(c.call("tma_prefetch_descriptor", f"&{tmap.name}") + ";")

    def _origins(self, tile: str, guarded: bool = False) -> None:
        c = self.code
        names = [a.origin for a in self.hooks.grid_axes]
        if guarded:
            c(f"int {' = 0, '.join(names)} = 0;")
            c(f"if ({tile} < TILES) tile_origin({tile}, {', '.join(names)});")
        else:
            c(f"int {', '.join(names)};")
            c(f"tile_origin({tile}, {', '.join(names)});")

    def _producer(self) -> None:
        c, s = self.code, self.structure
        c.comment("Producer warpgroup: registers go to the consumers; one thread issues the loads.")
        c(c.call("setmaxnreg_dec<PRODUCER_REGS>") + ";")
        self.record.register_budgets["producer"] = s.sprogram.roles.producer_regs
        with c.block("if (threadIdx.x == 0)"):
            self._prefetch_maps()
            for ring in s.rings:
                c(f"int {ring.stream}_stage = 0;  // {ring.stream} ring slot of the next load")
                c(f"u32 {ring.stream}_phase = 0;  // flips at each pass over the ring")
            if s.tile_buffers:
                c("u32 tile_phase = 0;  // flips at each output tile of this block")
            owners = "OWNERS" if s.pingpong else 1
            with self._units(), c.block(f"for (int owner = 0; owner < {owners}; ++owner)"):
                c("const int tile = unit * OWNERS + owner;")
                c("if (tile >= TILES) break;")
                self._origins("tile")
                for buffer in s.tile_buffers:
                    c(self._tile_load_call(buffer, "tile_phase ^ 1"))
                if s.tile_buffers:
                    c("tile_phase ^= 1;")
                trips = self._trips()
                with c.block(f"for (int trip = 0; trip < {trips}; ++trip)"):
                    for ring in s.rings:
                        st, ph = f"{ring.stream}_stage", f"{ring.stream}_phase"
                        trip = "trip0 + trip" if self.layout.stream_k is not None else "trip"
                        c(self._load_call(ring, st, f"{ph} ^ 1", trip))
                        c(f"if (++{st} == {ring.const}_STAGES) {{ {st} = 0; {ph} ^= 1; }}")

    # ----- consumers -----------------------------------------------------------------
    def _consumer(self) -> None:
        c, s, lay = self.code, self.structure, self.layout
        if lay.tma_store or lay.stream_k is not None:
            c(f"const int thread_in_wg = threadIdx.x % {WARPGROUP};")
        self.hooks.consumer_state(c)
        c("int loads_before = 0;  // loads of this block's sequence before the current unit")
        if lay.staging == "ring" and not s.pingpong:
            c("int store_round = 0;  // sub-tiles stored so far (ring slot = store_round % 2)")
        if s.turns:
            c("bool first_turn = true;")
        if s.tile_buffers:
            c("u32 tile_phase = 0;  // flips at each output tile of this block")
        if not s.warp_specialized:
            self._load_ahead()
        with self._units():
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

    def _load_ahead(self) -> None:
        """No producer: the loader's thread 0 issues each ring's loads STAGES ahead."""
        c, s, trips = self.code, self.structure, self.hooks.trips
        c.comment(f"No producer: {s.loader}'s thread 0 issues the loads, STAGES ahead of the "
                  "slowest reader.")
        c("const int block_tiles = (TILES - blockIdx.x + gridDim.x - 1) / gridDim.x;"
          if s.persistent else "const int block_tiles = 1;")
        c(f"const int block_loads = block_tiles * {trips};")
        for ring in s.rings:
            c.comment(f"{ring.stream} load x of this block's sequence: trip x % {trips} of "
                      f"the block's tile x / {trips}")
            with c.block(f"auto load_ahead_{ring.stream} = [&](int x)", tail="};"):
                tile = (f"blockIdx.x + (x / {trips}) * gridDim.x" if s.persistent
                        else "blockIdx.x")
                c(f"const int tile = {tile};")
                self._origins("tile")
                c(self._load_call(ring, ring.stage("x"), f"({ring.parity('x')}) ^ 1",
                                  f"x % {trips}"))
        with c.block("if (threadIdx.x == 0)"):
            self._prefetch_maps()
            for ring in s.rings:
                with c.block(f"for (int ahead = 0; ahead < {ring.const}_STAGES && ahead < "
                             "block_loads; ++ahead)"):
                    c(f"load_ahead_{ring.stream}(ahead);")
        c("__syncwarp();")

    def _cooperative_unit(self) -> None:
        c = self.code
        c("const int tile = unit;")
        self._origins("tile")
        c("const int row0 = consumer * CONSUMER_ROWS;  // this warpgroup's rows")
        trips = self._trips()
        c("const int x0 = loads_before;")
        c(f"loads_before += {trips};")
        self.hooks.begin_tile(c)
        self._tile_buffers_acquire()
        self._prologue()
        self._tile_buffers_release(held=False)
        if is_pipelined(self.structure):
            PipelinedLoop(self, "x0", trips).write()
        else:
            self._mainloop("x0", trips, turns_per_trip=True)
        self._tile_buffers_release(held=True)
        if self.structure.tile_buffers:
            c("tile_phase ^= 1;")
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
            self.emit_at(issue, TripAt("0"))
            if issue.kind is STaskKind.MMA:
                c(c.call("wgmma_wait<0>") + ";")
                c("#pragma unroll")
                self.hooks.pin(c, issue.stask)

    def _tile_buffers_acquire(self) -> None:
        """Without a producer, the loader loads this tile's buffers; every consumer waits
        for them."""
        c, s = self.code, self.structure
        if not s.tile_buffers:
            return
        if not s.warp_specialized:
            with c.block("if (threadIdx.x == 0)"):
                for buffer in s.tile_buffers:
                    c(self._tile_load_call(buffer, "tile_phase ^ 1"))
            c("__syncwarp();")
        for buffer in s.tile_buffers:
            c.comment(f"{buffer.full_name}: this tile's {buffer.load} has landed")
            c(c.call("mbarrier_wait", buffer.full(), "tile_phase") + ";")

    def _tile_buffers_release(self, *, held: bool) -> None:
        """Release the tile buffers the loop reads (``held``) or those it does not."""
        c = self.code
        for buffer in self.structure.tile_buffers:
            if self.hooks.holds_tile_buffer(buffer.load) != held:
                continue
            c.comment(f"{buffer.empty_name}: this warp is done with the tile's {buffer.load}")
            c(c.call("mbarrier_arrive_warp", buffer.empty(), "lane") + ";")

    def _pingpong_unit(self) -> None:
        c, trips = self.code, self.hooks.trips  # the same for every tile (layout checks)
        c("const int tile = unit * OWNERS + consumer;")
        c("const int unit_tiles = TILES - unit * OWNERS < OWNERS ? TILES - unit * OWNERS : OWNERS;")
        c(f"const int x0 = loads_before + consumer * {trips};  // after earlier owners")
        c(f"loads_before += unit_tiles * {trips};")
        self._origins("tile", guarded=True)
        c("const int row0 = 0;")
        self.hooks.begin_tile(c)
        mmas = [i for i in self._loop() if i.kind is STaskKind.MMA]
        for turn in self.structure.turns:
            if turn.waiter == mmas[0].stask:
                self.turn_wait(turn.waiter)
                break
        with c.block("if (tile < TILES)"):
            self._mainloop("x0", trips, turns_per_trip=False)
        self.turn_pass(mmas[-1].stask)
        with c.block("if (tile < TILES)"):
            self._epilogue()

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
                self._emit(s.consumer_roles, issue)
                if turns_per_trip:
                    self.turn_pass(issue.stask)
                if not self._pass_pending:
                    self._flush_refills()
                if issue.kind is STaskKind.MMA:
                    self._wgmma_wait(issue, "x", "trip")
                else:
                    # Register math reads its stage synchronously: done once it is written.
                    self._release(issue.stask, "x")
        self._pass_pending = False
        for issue in loop:
            if issue.kind is STaskKind.MMA and s.inflight.get(issue.stask):
                c(c.call("wgmma_wait<0>") + ";")
                c("#pragma unroll")
                self.hooks.pin(c, issue.stask)
                self._release(issue.stask, f"{x0} + {trips} - 1")

    def _wgmma_wait(self, issue: Issue, x: str, trip: str) -> None:
        """Wait for the wgmma groups the sProgram does not leave in flight, then release
        the stages whose last reader they were."""
        c = self.code
        pending = self.structure.inflight.get(issue.stask, 0)
        self.record.wgmma_pending[issue.stask] = pending
        if pending:
            c.comment(f"{issue.stask}_inflight: keep this wgmma group in flight; the previous "
                      "one is done")
        c(c.call(f"wgmma_wait<{pending}>") + ";")
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
            self.release_stage(ring, x)
            if not s.warp_specialized:
                # A deferred refill is written outside the block that guards the release.
                self._refills.append((ring, x, guard if self._pass_pending else ""))
        if not self._pass_pending:
            self._flush_refills()

    def _flush_refills(self) -> None:
        c = self.code
        for ring, x, guard in self._refills:
            cond = f"{guard} && " if guard else ""
            c(f"if ({cond}threadIdx.x == 0 && ({x}) + {ring.const}_STAGES < block_loads) "
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
                self._emit(s.consumer_roles, issue)
