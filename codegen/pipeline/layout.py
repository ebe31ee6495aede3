"""Every number the skeleton needs, derived once from the sProgram, the operator's hooks
and the device: consumer rows, units of work and the grid, ring stage bytes, the epilogue's
staging, the shared-memory plan, named-barrier ids and the register budget.

:meth:`PipelineLayout.problem` says why the skeleton cannot lower a schedule; the space
asks it (through the renderer's feasibility check) before anything is compiled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from codegen.cuda import Swizzle, swizzle
from codegen.cuda.tma import BOX_DIM_MAX
from codegen.pipeline import split_k, stream_k
from codegen.pipeline.emitters import EMITTERS, MATH_KINDS
from codegen.pipeline.hooks import GridAxis, OperatorHooks, OutputTile, ctype
from codegen.pipeline.limits import (
    BAR_EPILOGUE0,
    NAMED_BARRIERS_MAX,
    REGISTER_FILE,
    WARPGROUP,
)
from codegen.pipeline.pipelined import lead_problem
from codegen.pipeline.structure import Issue, PipelineStructure, Ring
from scheduler_search.hardware.model import Device, UnitKind
from scheduler_search.ir import STaskKind
from scheduler_search.ops import parse_spec
from scheduler_search.sprogram import StreamKShare
from scheduler_search.sprogram.smem import (
    BufferRegions,
    OutputFragment,
    RingRegions,
    SmemPlan,
    SplitKRegions,
    StagedTile,
    Staging,
    plan_shared_memory,
    staging_of,
    staging_slots,
)

#: Stream-K's workspace: one counter a shared tile, padded so the parts start aligned.
STREAM_K_COUNT_ALIGN = 256


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class PipelineLayout:
    """The skeleton's plan of one kernel."""

    structure: PipelineStructure
    hooks: OperatorHooks
    device: Device

    # ----- consumers and units of work ------------------------------------------------
    @cached_property
    def output(self) -> OutputTile:
        return self.hooks.output()

    @cached_property
    def consumer_rows(self) -> int:
        """Output rows one consumer warpgroup owns (cooperative warpgroups split them)."""
        s = self.structure
        return self.output.rows if s.pingpong else self.output.rows // s.consumers

    @property
    def tiles(self) -> int:
        """Tiles of the order the units walk: a cluster's blocks take one together."""
        tiles = math.prod(axis.tiles for axis in self.hooks.grid_axes)
        return tiles // self.structure.cluster_size

    @property
    def units(self) -> int:
        return _ceil_div(self.tiles, self.structure.owners)

    @property
    def grid(self) -> int:
        """Blocks launched: a whole number of clusters, one wave of them when persistent
        (as many as the device runs at once: a second wave would run after the first).
        A kernel that counts its tiles at run time launches the whole wave."""
        size = self.launch_cluster
        if self.structure.sprogram.stream_k is not None:  # every SM: fewer tiles split more
            return self.device.clusters_at_once(size) * size
        if self.structure.persistent and self.runtime_axes:
            return self.device.clusters_at_once(size) * size
        if self.structure.persistent:
            return min(self.device.clusters_at_once(size), self.units) * size
        return self.units * size

    @property
    def split_blocks(self) -> int:
        """Blocks that split each tile's loop trips (1: no split-K)."""
        split = self.structure.sprogram.split_k
        return split.blocks if split else 1

    @property
    def launch_cluster(self) -> int:
        """Blocks of a launched cluster: a multicast cluster's, or split-K's (1: none)."""
        return self.structure.cluster_size * self.split_blocks

    # ----- run-time sizes --------------------------------------------------------------
    @property
    def runtime_axes(self) -> tuple[GridAxis, ...]:
        """The grid axes whose extent follows from a size argument (tiles counted in the
        kernel)."""
        return tuple(axis for axis in self.hooks.grid_axes if axis.runtime)

    @property
    def runtime_dims(self) -> tuple[str, ...]:
        """The workload dimensions the kernel takes as arguments, in parameter order."""
        return self.hooks.runtime_dims

    def runtime_problem(self) -> str | None:
        """Sizes are taken at run time by persistent kernels (their grid is one wave,
        whatever the size); a cluster along a run-time axis counts whole clusters
        (:meth:`PipelineSkeleton._runtime_sizes`)."""
        s, dims = self.structure, self.hooks.runtime_dims
        if not dims:
            return None
        capable = self.hooks.runtime_capable
        if not set(dims) <= set(capable):
            return (f"{s.sprogram.op} takes {', '.join(capable) or 'no dimension'} at run time, "
                    f"not {', '.join(d for d in dims if d not in capable)}")
        if not s.persistent and self.runtime_axes:
            return "tiles counted at run time need a persistent grid"
        cluster = s.sprogram.cluster
        spanned = [a for a in self.runtime_axes if cluster is not None and a.name == cluster.axis]
        if spanned and not spanned[0].last_inside and s.sprogram.stream_k is None:
            # A whole cluster's blocks past the size would start outside the tensor
            # (stream-K's own check names why its clusters cannot take the size).
            return (f"a cluster along {spanned[0].name} at a run-time size needs its last "
                    "tiles pulled back inside it")
        return None

    # ----- stream-K ------------------------------------------------------------------
    @cached_property
    def stream_k(self) -> StreamKShare | None:
        """Which block (cluster) runs which trips of the last tiles (over this grid), or
        None: a cluster's blocks take their tiles' trips together."""
        sk = self.structure.sprogram.stream_k
        if sk is None:
            return None
        return StreamKShare(tiles=self.tiles, trips=self.hooks.trip_count,
                            blocks=self.grid // self.structure.cluster_size, waves=sk.waves)

    @property
    def stream_k_count_bytes(self) -> int:
        """The workspace's head: a counter of finished parts for each shared tile and
        block of a cluster (at a run-time size, as many as the most tiles the waves can
        share: fewer than ``waves`` grids)."""
        assert self.stream_k is not None
        counts = (self.stream_k.waves * self.grid if self.runtime_axes
                  else self.stream_k.sk_tiles * self.structure.cluster_size)
        return _ceil_div(4 * counts, STREAM_K_COUNT_ALIGN) * STREAM_K_COUNT_ALIGN

    @property
    def stream_k_part_floats(self) -> int:
        """fp32 sums of one consumer's rows of a tile: what a part holds a consumer."""
        return self.fragment.part_floats

    @property
    def stream_k_workspace_bytes(self) -> int:
        """Counters, then two parts (slots) a block, each every consumer's rows."""
        parts = 2 * self.grid * self.structure.consumers * self.stream_k_part_floats
        return self.stream_k_count_bytes + 4 * parts

    # ----- tensors -------------------------------------------------------------------
    @cached_property
    def tensor_dtypes(self) -> dict[str, str]:
        """The spec's tensors and their element types (the contract's one home)."""
        sp = self.structure.sprogram
        return {t.name: t.dtype for t in parse_spec(sp.op, sp.params).tensors()}

    def pointer_type(self, tensor: str) -> str:
        """C++ element type of a tensor passed as a plain pointer."""
        return ctype(self.tensor_dtypes[tensor])

    # ----- rings ---------------------------------------------------------------------
    def stage_bytes(self, ring: Ring) -> int:
        """Bytes of one stage: what its TMA loads deliver (out-of-bounds zeros count too)."""
        return sum(self.hooks.operand(load).stage_bytes for load in ring.loads)

    @property
    def ring_bytes(self) -> int:
        return sum(ring.depth * self.stage_bytes(ring) for ring in self.structure.rings)

    # ----- epilogue ------------------------------------------------------------------
    @cached_property
    def store_unit(self) -> UnitKind:
        """The sEU the consumers' store sTask is issued on."""
        s = self.structure
        return next(i.unit for i in s.compute_stream(s.consumer_roles[0])
                    if i.kind is STaskKind.STORE and i.phase == "epilogue")

    @property
    def tma_store(self) -> bool:
        return self.store_unit is UnitKind.TMA

    @cached_property
    def fragment(self) -> OutputFragment:
        """The output tile as the shared-memory plan stages and sums it."""
        out = self.output
        return OutputFragment(rows=out.rows, cols=out.cols, elem_bytes=out.elem_bytes,
                              transposed=out.transposed, consumer_rows=self.consumer_rows,
                              consumers=self.structure.consumers)

    @property
    def store_cols(self) -> int:
        return self.fragment.store_cols

    @property
    def store_swizzle(self) -> Swizzle:
        return swizzle.SWIZZLES[self.store_cols * self.output.elem_bytes]

    @property
    def store_subtiles(self) -> int:
        """Sub-tiles a consumer stores in turn: column slabs of its rows, or the 64-row
        blocks of its transposed fragment."""
        if self.output.transposed:
            return self.consumer_rows // self.hooks.target.mma_rows
        return self.output.cols // self.store_cols

    @property
    def c_block_bytes(self) -> int:
        return self.fragment.block_bytes

    @property
    def c_slot_bytes(self) -> int:
        return self.fragment.slot_bytes

    @property
    def staging(self) -> Staging:
        """Where the output is staged for the TMA store (:func:`staging_of`)."""
        s = self.structure
        return staging_of(self.tma_store, self.fragment, self.ring_bytes,
                          keeps_loading=s.persistent or s.pingpong)

    @property
    def c_slots(self) -> int:
        s = self.structure
        return staging_slots(self.staging, pingpong=s.pingpong, consumers=s.consumers)

    # ----- shared memory -------------------------------------------------------------
    @cached_property
    def smem(self) -> SmemPlan:
        """The plan of :func:`plan_shared_memory` with the operator's tiles and the
        kernel's constant names (the validator lays out the same plan)."""
        s = self.structure

        def tile(load: str) -> StagedTile:
            operand = self.hooks.operand(load)
            return StagedTile(operand.const, operand.stage_bytes)

        rings = [RingRegions(ring.depth, tuple(tile(load) for load in ring.loads),
                             ring.full_name.upper(), ring.empty_name.upper())
                 for ring in s.rings]
        buffers = [BufferRegions(tile(b.load), b.full_name.upper(), b.empty_name.upper())
                   for b in s.tile_buffers]
        regions = None
        if s.sprogram.split_k is not None:
            regions = SplitKRegions(split_k.PART, split_k.FULL, split_k.FREE)
        own = [StagedTile(t.const, t.stage_bytes) for t in self.hooks.consumer_tiles()]
        return plan_shared_memory(rings, buffers, self.fragment, tma_store=self.tma_store,
                                  persistent=s.persistent, pingpong=s.pingpong,
                                  split_k=regions, side_row_bytes=s.graph.side_row_bytes,
                                  consumer_tiles=own)

    # ----- named barriers ------------------------------------------------------------
    @property
    def bar_turn0(self) -> int:
        """Id of the turn into consumer 0; consumer i's turn is ``bar_turn0 + i``."""
        return BAR_EPILOGUE0 + self.structure.consumers

    # ----- registers -----------------------------------------------------------------
    @property
    def register_cap(self) -> int:
        """Registers per thread ptxas compiles the whole kernel with.

        ``__launch_bounds__(threads, 1)`` caps every thread at the register file over the
        block's threads; setmaxnreg moves registers between warpgroups at run time, but
        ptxas allocates the consumer code within the entry cap (nvcc 13.0: a 512-thread
        kernel with a 128-register MMA accumulator fails with C7602 "Insufficient
        registers (128)"). Not always: where the operator's hooks say so
        (``consumers_past_entry_cap``), the consumers may use their setmaxnreg budget (nvcc
        13.0: the attention backward of two 64-key consumers at head_dim 128, 384 threads,
        uses R0-R229 after its setmaxnreg to 240, no spill).
        """
        s = self.structure
        if self.hooks.consumers_past_entry_cap and s.warp_specialized:
            return s.sprogram.roles.consumer_regs
        per_thread = min(self.device.regs_per_thread_max, REGISTER_FILE // s.threads)
        return per_thread // 8 * 8

    @property
    def consumer_regs_needed(self) -> int:
        """The registers a consumer thread's code is estimated to need: its accumulators,
        the operator's overhead and the target's MMA operands."""
        return (self.hooks.accumulator_regs(self.consumer_rows) + self.hooks.overhead_regs
                + self.hooks.target.operand_regs)

    # ----- what the skeleton cannot lower --------------------------------------------
    def problem(self) -> str | None:
        """Why this schedule cannot be generated, or None."""
        return (self.hooks.problem() or self.runtime_problem() or self._raster_problem()
                or self.structure_problem()
                or self.cluster_problem() or stream_k.problem(self) or split_k.problem(self)
                or self.resource_problem())

    def _raster_problem(self) -> str | None:
        if self.structure.sprogram.raster.heaviest_first and not any(
                a.heaviest_last or a.lightest_last for a in self.hooks.grid_axes):
            return "raster_heaviest_first: no grid axis of this kernel has uneven tiles"
        return None

    def cluster_problem(self) -> str | None:
        """Clusters are lowered with a producer warp (a consumer that waited on a peer
        block's release could stall its own warpgroup's math) for operators that cut
        their shared tiles into multicast slices."""
        cluster = self.structure.sprogram.cluster
        if cluster is None:
            return None
        if cluster.axis not in self.hooks.cluster_axes:
            return f"{self.structure.sprogram.op} lowers no cluster along {cluster.axis}"
        if not self.structure.warp_specialized:
            return "thread-block clusters need a producer warp"
        if self.structure.sprogram.raster.heaviest_first:
            return "the heaviest-first tile order is not lowered over clusters' tiles"
        if set(cluster.multicast) & {t.load for t in self.structure.tile_buffers}:
            return "tiles loaded once per output tile are not multicast"
        for load in cluster.multicast:
            problem = self.hooks.operand(load).slice_problem()
            if problem:
                return problem
        return None

    def structure_problem(self) -> str | None:
        """Shapes of sProgram the skeleton has no lowering for."""
        return self._stream_problem() or self._barrier_problem() or lead_problem(self.structure)

    def _element_math(self, issue: Issue) -> bool:
        """Whether ``issue`` is epilogue math the store applies pair by pair."""
        return issue.phase == "epilogue" and issue.stask in self.hooks.element_stasks

    def _stream_problem(self) -> str | None:
        s = self.structure
        tile_loads = {t.load for t in s.tile_buffers}
        for role in s.roles:
            for issue in s.stream(role):
                if (issue.kind, issue.unit) not in EMITTERS:
                    return f"{issue.stask}: no emitter for {issue.kind.value} on {issue.unit.value}"
                if (issue.kind in MATH_KINDS and issue.stask not in self.hooks.math_stasks
                        and not self._element_math(issue)):
                    return f"{issue.stask}: {s.sprogram.op} writes no register math for it"
                if (issue.kind is STaskKind.LOAD and issue.unit is UnitKind.CUDA_CORE
                        and issue.stask not in self.hooks.thread_loads):
                    return f"{issue.stask}: {s.sprogram.op} writes no thread load for it"
                if (issue.kind is STaskKind.STORE and issue.phase == "loop"
                        and issue.stask not in self.hooks.loop_stores):
                    return f"{issue.stask}: {s.sprogram.op} writes no store in the loop for it"
                if issue.phase == "prologue" and issue.stask not in tile_loads and s.pingpong:
                    return (f"{issue.stask}: prologue sTasks other than tile loads are not "
                            "lowered for pingpong consumers")
        if s.warp_specialized and s.compute_stream("producer"):
            return "the producer warp issues only loads"
        streams = {tuple((i.stask, i.unit) for i in s.compute_stream(r)) for r in s.consumer_roles}
        if len(streams) > 1:
            return "consumer warpgroups with different streams"
        variable = self.hooks.tile_trips() is not None
        if variable and not s.warp_specialized:
            return "tiles of different trip counts need a producer warp"
        if s.tile_buffers and s.pingpong and not self.hooks.owner_tile_buffers:
            return (f"{s.sprogram.op} reads its tiles loaded once per output tile from one "
                    "copy; pingpong consumers each need their own")
        return None

    def _barrier_problem(self) -> str | None:
        s = self.structure
        if s.unringed_barriers():
            return "barriers outside the operand rings are not lowered yet"
        if any(s.inflight.get(b.deps[0][0]) for b in s.result_waits()):
            return "an MMA result read by the CUDA cores while its MMA group stays in flight"
        if not s.rings or any(r.loader != s.loader for r in s.rings):
            return "every operand stream needs a ring filled by the loader role"
        if any(t.loader != s.loader for t in s.tile_buffers):
            return "tiles loaded once per output tile must be loaded by the loader role"
        if s.pingpong and not s.warp_specialized:
            return "pingpong needs warp specialisation"
        if s.pingpong and not s.turns:
            # A later owner would wait on full phases two or more passes of the ring
            # ahead, which a parity wait cannot tell from the current one (it passes early:
            # hangs and faults seen on an H200). Taking turns bounds the lead to one pass.
            return "pingpong consumer warpgroups must take turns on the tensor cores"
        if s.turns and sorted(t.to_role for t in s.turns) != sorted(s.consumer_roles):
            return "turn barriers must go round every consumer warpgroup"
        if self.bar_turn0 + s.consumers > NAMED_BARRIERS_MAX:
            return "more named barriers than a block has"
        for ring in s.rings:
            if s.inflight.get(ring.last_reader) and ring.depth < 2:
                # The stage of the MMA left in flight is the only slot: the next load
                # waits for its release, which comes after the next MMA: a deadlock.
                return f"an MMA group in flight needs {ring.stream} stages >= 2"
        return None

    def _transposed_store_problem(self) -> str | None:
        """A transposed fragment goes to shared memory with ``stmatrix.trans`` (16-bit
        outputs), in 64-row blocks one consumer each (cooperative consumers)."""
        out = self.output
        if out.elem_bytes != 2:
            return f"a transposed TMA store of {out.dtype} (stmatrix moves 16-bit elements)"
        if self.structure.pingpong:
            return "a transposed TMA store with pingpong consumers"
        if out.cols % 8 or out.cols > BOX_DIM_MAX:
            return f"a transposed TMA store of {out.cols} columns (8-column groups, <= 256)"
        return None

    def resource_problem(self) -> str | None:
        """Shared memory, TMA boxes and registers against the device."""
        s = self.structure
        if self.consumer_rows % self.hooks.target.mma_rows:
            return f"{self.consumer_rows} consumer rows in MMA blocks"
        loads = [load for ring in s.rings for load in ring.loads]
        boxes = [self.hooks.operand(load).box_outer
                 for load in loads + [t.load for t in s.tile_buffers]]
        if max([*boxes, self.consumer_rows]) > BOX_DIM_MAX:
            return "TMA box over 256 rows"
        if self.tma_store and not self.output.transposed and self.output.cols % self.store_cols:
            return f"a TMA store of {self.output.cols} columns in 32-byte sub-tiles"
        if self.tma_store and self.output.transposed:
            problem = self._transposed_store_problem()
            if problem:
                return problem
        limit = self.device.smem_per_block_bytes
        if self.smem.dynamic_bytes > limit:
            return f"{self.smem.dynamic_bytes} B of shared memory (with alignment) > {limit} B"
        if s.warp_specialized:
            roles = s.sprogram.roles
            total = WARPGROUP * (roles.producer_regs + s.consumers * roles.consumer_regs)
            if total > REGISTER_FILE:
                return f"{total} registers per block"
            if roles.producer_regs < self.hooks.producer_min_regs:
                return (f"the producer's loads need {self.hooks.producer_min_regs} registers, "
                        f"not {roles.producer_regs}")
        need = self.consumer_regs_needed
        if need > self.register_cap:
            return (f"{need} registers per consumer thread > {self.register_cap}, what ptxas "
                    f"may allocate for {s.threads} threads")
        return None
