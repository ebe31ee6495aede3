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
  MMA wait (one group left in flight where the sProgram says so) and the release
  (``empty[s]``) of the rings it reads last; then the epilogue's sTasks;
- around them: shared-memory plan, barrier initialisation, role dispatch with setmaxnreg
  budgets, the tile loop (persistent or one unit per block) and its raster.

The skeleton is the shared writer (the code buffer, the record, the emitter table's entry
and the kernel's frame); each role's part has its own writer on it:
:class:`~codegen.pipeline.loader.Loader`, :class:`~codegen.pipeline.consumers.Consumers`
and the :class:`~codegen.pipeline.tile_loop.TileLoop` they both walk.

Every emitter appends to an :class:`~codegen.pipeline.record.EmissionRecord`, the
kernel's structure as written, which tests hold against the sProgram.
"""

from __future__ import annotations

from codegen.cuda import prelude
from codegen.pipeline import epilogue, split_k, stream_k
from codegen.pipeline.code import Code
from codegen.pipeline.consumers import Consumers
from codegen.pipeline.emitters import EMITTERS
from codegen.pipeline.hooks import OperatorHooks
from codegen.pipeline.layout import PipelineLayout
from codegen.pipeline.limits import REGISTER_FILE, WARP, WARPGROUP
from codegen.pipeline.loader import Loader
from codegen.pipeline.pipelined import TripAt
from codegen.pipeline.raster import emit_tile_origin
from codegen.pipeline.record import EmissionRecord, EmittedIssue, EmittedRing
from codegen.pipeline.structure import Issue, Ring
from codegen.pipeline.tile_loop import TileLoop
from scheduler_search.sprogram.smem import MBARRIER_BYTES, SMEM_ALIGN


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
        #: The trip the sTask being written works on (a pipelined loop's lead sTasks
        #: work on the next one).
        self.at = TripAt()
        #: Off while a pipelined loop writes its prologue and last trip: the record holds
        #: each role's stream once, as the loop's steady trips issue it.
        self.recording = True
        #: Epilogue math sTasks waiting for the store that applies them pair by pair.
        self.element_math: list[str] = []
        #: The writers of the kernel's parts, by role.
        self.tiles = TileLoop(self)
        self.loader = Loader(self)
        self.consumers = Consumers(self)

    # ----- lookups -------------------------------------------------------------------
    def ring_of(self, stask: str) -> Ring | None:
        """The ring a load sTask fills, or None for a tile loaded once per output tile."""
        return next((r for r in self.structure.rings if stask in r.loads), None)

    def readers_of(self, ring: Ring) -> set[str]:
        """The sTasks that read a ring's stage (from its first to its last reader)."""
        names = [i.stask for i in self.structure.compute_stream(self.structure.consumer_roles[0])]
        first, last = names.index(ring.first_reader), names.index(ring.last_reader)
        return set(names[first : last + 1])

    def emit(self, roles: tuple[str, ...], issue: Issue) -> None:
        """Write ``issue`` once for ``roles`` (the consumer warpgroups run one text)."""
        EMITTERS[(issue.kind, issue.unit)](self, roles, issue)

    def emit_at(self, issue: Issue, at: TripAt) -> None:
        """Write ``issue`` for the consumers, working on trip ``at``."""
        self.at = at
        self.emit(self.structure.consumer_roles, issue)
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
            self.loader.tile_load_function(buffer)
        for ring in self.structure.rings:
            self.loader.load_function(ring)
        self._kernel()
        primitives = prelude(self.code.uses, self.hooks.target.snippet_variants)
        return self._header() + "\n" + primitives + "\n" + self.code.text()

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
            kind = self.hooks.target.barrier_name(barrier.kind)
            lines.append(f"//   barrier {barrier.name} ({kind}, {barrier.slots} slot(s)): "
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
        self.hooks.target.write_kernel_constants(c, lay.register_cap - lay.consumer_regs_needed)
        c("")
        self.hooks.constants(c, lay.consumer_rows)
        if lay.stream_k is not None:
            stream_k.emit_constants(c, lay)
        if lay.split_blocks > 1:
            split_k.emit_constants(c, lay)
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

    # ----- the kernel ----------------------------------------------------------------
    def _kernel(self) -> None:
        c, s, lay = self.code, self.structure, self.layout
        params = [f"const __grid_constant__ {self.hooks.target.tensor_map_type(m)} {m.name}"
                  for m in self.hooks.tensor_maps()]
        out = lay.output
        if lay.tma_store:
            params.append(f"const __grid_constant__ TensorMap {out.map_name}")
        else:
            params.append(f"{out.ctype}* __restrict__ {out.tensor}")
        if out.second is not None:
            params.append(f"{out.ctype}* __restrict__ {out.second.tensor}")
        params += [f"{lay.pointer_type(name)}* __restrict__ {name}"
                   for name in self.hooks.side_outputs()]
        params += [f"const {lay.pointer_type(name)}* __restrict__ {name}"
                   for name in self.hooks.pointer_inputs()]
        params += [f"unsigned char* __restrict__ {w.name}" for w in self.hooks.workspaces()]
        if lay.stream_k is not None:
            params.append(f"unsigned char* __restrict__ {stream_k.WORKSPACE}")
        params += [f"const int {self.hooks.size_arg(d)}" for d in lay.runtime_dims]
        cluster = f"__cluster_dims__({lay.launch_cluster}, 1, 1) " if lay.launch_cluster > 1 else ""
        c(f'extern "C" __global__ void {cluster}__launch_bounds__({s.threads}, 1)')
        with c.block(f"{self.entry}({', '.join(params)})"):
            c("extern __shared__ __align__(1024) unsigned char smem_raw[];")
            c(f"const u32 smem = ({c.call('smem_u32', 'smem_raw')} + 1023u) & ~1023u;")
            c(f"const int warpgroup = threadIdx.x / {WARPGROUP};")
            c(f"const int warp = (threadIdx.x / {WARP}) % 4, lane = threadIdx.x % {WARP};")
            if s.cluster_size > 1:
                c("const int cluster_id = blockIdx.x / CLUSTER, clusters = gridDim.x / CLUSTER;")
            if lay.split_blocks > 1:
                c("const int cluster_id = blockIdx.x / SPLIT, clusters = gridDim.x / SPLIT;")
                split_k.emit_block_state(c)
            c("")
            self._runtime_sizes()
            self._init_rings()
            if s.warp_specialized:
                with c.block("if (warpgroup == 0)"):
                    self.loader.producer()
                with c.block("else"):
                    self.hooks.target.write_register_budget(c, "consumer")
                    for role in s.consumer_roles:
                        self.record.register_budgets[role] = s.sprogram.roles.consumer_regs
                    c("const int consumer = warpgroup - 1;")
                    self.consumers.write()
            else:
                c("const int consumer = warpgroup;")
                self.consumers.write()
            if lay.launch_cluster > 1:
                c.comment("no block exits while a peer may still arrive on its barriers"
                          + (" or read its shared memory" if lay.split_blocks > 1 else ""))
                c(c.call("cluster_sync") + ";")
        c("")

    @property
    def _full_arrivals_said(self) -> str:
        loaders = self.hooks.target.loader_threads
        return ("1 arrival (+ TMA bytes)" if loaders == 1
                else f"{loaders} arrivals (each loading thread's copies landed)")

    def _init_rings(self) -> None:
        c = self.code
        loaders = self.hooks.target.loader_threads
        with c.block("if (threadIdx.x == 0)"):
            for ring in self.structure.rings:
                whose = " of each block of the cluster" if ring.cluster_blocks > 1 else ""
                c.comment(f"{ring.full_name}[s]: {self._full_arrivals_said}; {ring.empty_name}[s]: "
                          f"{ring.empty_arrivals} arrivals (one per reading consumer warp"
                          f"{whose}).")
                with c.block(f"for (int s = 0; s < {ring.const}_STAGES; ++s)"):
                    c(c.call("mbarrier_init", ring.full("s"), loaders) + ";")
                    c(c.call("mbarrier_init", ring.empty("s"), ring.empty_arrivals) + ";")
                self.record.rings[ring.stream] = EmittedRing(
                    ring.stream, ring.full_name, ring.empty_name, ring.depth, loaders,
                    ring.empty_arrivals, self.layout.stage_bytes(ring))
            for buffer in self.structure.tile_buffers:
                c.comment(f"{buffer.full_name}: {self._full_arrivals_said}; {buffer.empty_name}: "
                          f"{buffer.empty_arrivals} arrivals (the reading consumer warps).")
                if buffer.owners > 1:
                    with c.block("for (int owner = 0; owner < OWNERS; ++owner)"):
                        c(c.call("mbarrier_init", buffer.full("owner"), loaders) + ";")
                        c(c.call("mbarrier_init", buffer.empty("owner"),
                                 buffer.empty_arrivals) + ";")
                else:
                    c(c.call("mbarrier_init", buffer.full(), loaders) + ";")
                    c(c.call("mbarrier_init", buffer.empty(), buffer.empty_arrivals) + ";")
                self.record.tile_buffers[buffer.load] = (buffer.full_name, buffer.empty_name)
            if self.layout.split_blocks > 1:
                split_k.emit_barrier_init(c, self.layout)
            c(c.call("mbarrier_init_fence") + ";")
        if self.layout.launch_cluster > 1:
            c.comment("every block's barriers are initialised before any block multicasts")
            c(c.call("cluster_sync") + ";")
        else:
            c("__syncthreads();")
        c("")
