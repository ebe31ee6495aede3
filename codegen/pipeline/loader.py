"""The loader's part of a kernel: one device function per ring (wait for the slot, arm the
stage's bytes, the loads through the emitter table) and per tile buffer, and the role
that calls them: the producer warp, or, without one, the first consumer's thread 0
loading each ring's stages ahead."""

from __future__ import annotations

from codegen.pipeline.structure import Ring, TileBuffer
from codegen.pipeline.writer import RoleWriter


class Loader(RoleWriter):
    """Writes the load functions and the loop of the role that issues them."""

    def _load_params(self, ring: Ring) -> list[str]:
        maps = dict.fromkeys(self.hooks.tensor_map(t) for t in ring.loads)
        return [self._map_param(m) for m in maps]

    def _map_param(self, name: str) -> str:
        """The load function's parameter for the kernel's tensor map ``name``, of its type
        in the kernel's parameters (a target's copies may read it)."""
        arg = next(m for m in self.hooks.tensor_maps() if m.name == name)
        return f"const {self.target.tensor_map_type(arg)}* {name}"

    def load_function(self, ring: Ring) -> None:
        """``load_<stream>``: wait for the slot's release, arm its full barrier with the
        stage's bytes, then the ring's load sTasks."""
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
            self.target.write_arm_stage(c, "full", f"{ring.const}_TX_BYTES")
            for issue in s.load_stream(ring.loader):
                if issue.stask in ring.loads:
                    self.k.emit((ring.loader,), issue)
            self.target.write_stage_issued(c, "full")
        c("")

    def tile_load_function(self, buffer: TileBuffer) -> None:
        """``load_tile_<load>``: a tile buffer's load, once per output tile."""
        c, s = self.code, self.structure
        tile = self.hooks.operand(buffer.load)
        tmap = self.hooks.tensor_map(buffer.load)
        origins = ", ".join(f"int {a.origin}" for a in self.hooks.grid_axes)
        c.comment(f"{buffer.load}, once per output tile: wait until the consumers released the "
                  "previous tile's copy, then load it.")
        owner = "int owner, " if buffer.owners > 1 else ""
        head = (f"__device__ __forceinline__ void load_tile_{buffer.load}({owner}u32 empty_parity, "
                f"{origins}, u32 smem, {self._map_param(tmap)})")
        index = "owner" if buffer.owners > 1 else "0"
        with c.block(head):
            c(f"const u32 full = {buffer.full(index)};")
            c(c.call("mbarrier_wait", buffer.empty(index), "empty_parity") + ";")
            self.target.write_arm_stage(c, "full", f"{tile.const}_STAGE_BYTES")
            issue = next(i for i in s.load_stream(buffer.loader) if i.stask == buffer.load)
            self.k.emit((buffer.loader,), issue)
            self.target.write_stage_issued(c, "full")
        c("")

    def tile_load_call(self, buffer: TileBuffer, parity: str) -> str:
        """The call of a tile buffer\'s load function (into the copy of ``owner``, where
        each tile of a unit has its own)."""
        origins = ", ".join(a.origin for a in self.hooks.grid_axes)
        tmap = self.hooks.tensor_map(buffer.load)
        owner = "owner, " if buffer.owners > 1 else ""
        return f"load_tile_{buffer.load}({owner}{parity}, {origins}, smem, &{tmap});"

    def load_call(self, ring: Ring, stage: str, parity: str, trip: str) -> str:
        """The call of a ring\'s load function for one stage."""
        origins = ", ".join(a.origin for a in self.hooks.grid_axes)
        maps = ", ".join(f"&{m}" for m in dict.fromkeys(
            self.hooks.tensor_map(t) for t in ring.loads))
        return f"load_{ring.stream}({stage}, {parity}, {origins}, {trip}, smem, {maps});"

    def producer(self) -> None:
        """The producer warpgroup: gives its registers away; one thread walks the units
        and issues every trip's loads, ring slot by ring slot."""
        c, s = self.code, self.structure
        c.comment("Producer warpgroup: registers go to the consumers; one thread issues the loads.")
        self.target.write_register_budget(c, "producer")
        self.record.register_budgets["producer"] = s.sprogram.roles.producer_regs
        with c.block(f"if ({self.target.loader_guard()})"):
            self.k.tiles.prefetch_maps()
            for ring in s.rings:
                c(f"int {ring.stream}_stage = 0;  // {ring.stream} ring slot of the next load")
                c(f"u32 {ring.stream}_phase = 0;  // flips at each pass over the ring")
            if s.tile_buffers:
                c("u32 tile_phase = 0;  // flips at each output tile of this block")
            owners = "OWNERS" if s.pingpong else 1
            if s.pingpong and s.tile_buffers:
                with self.k.tiles.units():
                    self._owners_tile_buffers()
                    self._owner_loads(owners, tile_buffers=False)
                return
            with self.k.tiles.units():
                self._owner_loads(owners, tile_buffers=True)

    def _owners_tile_buffers(self) -> None:
        """Pingpong: every tile of the unit's buffers first, each into its owner's copy,
        so a later owner's lands while the earlier ones loop."""
        c = self.code
        c.comment("every owner's tile buffers first (a copy each), then the owners' trips")
        with c.block("for (int owner = 0; owner < OWNERS; ++owner)"):
            c("const int tile = unit * OWNERS + owner;")
            c("if (tile >= TILES) break;")
            self.k.tiles.origins("tile")
            for buffer in self.structure.tile_buffers:
                c(self.tile_load_call(buffer, "tile_phase ^ 1"))
        c("tile_phase ^= 1;  // each copy is loaded once a unit")

    def _owner_loads(self, owners: str | int, *, tile_buffers: bool) -> None:
        """Each tile of the unit in turn: its tile buffers (``tile_buffers``), then every
        trip's ring loads, slot by slot."""
        c, s = self.code, self.structure
        with c.block(f"for (int owner = 0; owner < {owners}; ++owner)"):
            c("const int tile = unit * OWNERS + owner;")
            c("if (tile >= TILES) break;")
            self.k.tiles.origins("tile")
            if tile_buffers:
                for buffer in s.tile_buffers:
                    c(self.tile_load_call(buffer, "tile_phase ^ 1"))
                if s.tile_buffers:
                    c("tile_phase ^= 1;")
            trips = self.k.tiles.trips()
            with c.block(f"for (int trip = 0; trip < {trips}; ++trip)"):
                for ring in s.rings:
                    st, ph = f"{ring.stream}_stage", f"{ring.stream}_phase"
                    shared = self.layout.stream_k is not None or self.layout.split_blocks > 1
                    trip = "trip0 + trip" if shared else "trip"
                    c(self.load_call(ring, st, f"{ph} ^ 1", trip))
                    c(f"if (++{st} == {ring.const}_STAGES) {{ {st} = 0; {ph} ^= 1; }}")

    def load_ahead(self) -> None:
        """No producer: the loader's thread 0 issues each ring's loads STAGES ahead."""
        c, s, trips = self.code, self.structure, self.hooks.trips
        who = ("thread 0 issues" if self.target.loader_threads == 1
               else f"first {self.target.loader_threads} threads issue")
        c.comment(f"No producer: {s.loader}'s {who} the loads, STAGES ahead of the "
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
                self.k.tiles.origins("tile")
                c(self.load_call(ring, ring.stage("x"), f"({ring.parity('x')}) ^ 1",
                                  f"x % {trips}"))
        with c.block(f"if ({self.target.loader_guard()})"):
            self.k.tiles.prefetch_maps()
            for ring in s.rings:
                with c.block(f"for (int ahead = 0; ahead < {ring.const}_STAGES && ahead < "
                             "block_loads; ++ahead)"):
                    c(f"load_ahead_{ring.stream}(ahead);")
        c("__syncwarp();")
