"""The tile loop every role of a kernel walks: its units of work over the grid of output
tiles (persistent, snaking, stream-K's shares or one unit a block), a tile's loop trips
and the origins of its tiles."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from codegen.pipeline import split_k, stream_k
from codegen.pipeline.writer import RoleWriter


class TileLoop(RoleWriter):
    """Writes the loop over a block's units and what each unit's tile starts with."""

    @contextmanager
    def units(self) -> Iterator[None]:
        """The block's units of work: strided over the grid (persistent; snaking over it when
        tiles differ in trips) or its own."""
        c = self.code
        # A cluster's blocks work on one unit together.
        block, blocks = (("cluster_id", "clusters") if self.layout.launch_cluster > 1
                         else ("blockIdx.x", "gridDim.x"))
        if self.layout.stream_k is not None:
            with stream_k.units(c, self.hooks.trips, block):
                yield
        elif self.layout.split_blocks > 1:
            with self._tiles(block, blocks), split_k.trip_range(c, self.hooks.trips):
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
        else:
            with self._tiles(block, blocks):
                yield

    @contextmanager
    def _tiles(self, block: str, blocks: str) -> Iterator[None]:
        """Units strided over the grid (persistent) or one a block (a cluster)."""
        c = self.code
        if self.structure.persistent:
            with c.block(f"for (int unit = {block}; unit < UNITS; unit += {blocks})"):
                yield
        else:
            c.comment("one unit per block" if block == "blockIdx.x"
                      else "one unit per cluster")
            with c.block(""):
                c(f"const int unit = {block};")
                yield

    def trips(self) -> str:
        """The current tile's loop trips: a constant, or ``trips`` declared here."""
        if self.layout.stream_k is not None or self.layout.split_blocks > 1:
            return "unit_trips"
        expr = self.hooks.tile_trips()
        if expr is None:
            return self.hooks.trips
        self.code(f"const int trips = {expr};  // loop trips of this tile")
        return "trips"

    def prefetch_maps(self) -> None:
        c = self.code
        for tmap in self.hooks.tensor_maps():
            c(c.call("tma_prefetch_descriptor", f"&{tmap.name}") + ";")

    def origins(self, tile: str, guarded: bool = False) -> None:
        c = self.code
        names = [a.origin for a in self.hooks.grid_axes]
        if guarded:
            c(f"int {' = 0, '.join(names)} = 0;")
            c(f"if ({tile} < TILES) tile_origin({tile}, {', '.join(names)});")
        else:
            c(f"int {', '.join(names)};")
            c(f"tile_origin({tile}, {', '.join(names)});")
