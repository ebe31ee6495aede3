"""The raster: which output tile a block works on next, as the sProgram orders them.

Tiles are visited along ``raster.major`` first, in bands of ``raster.swizzle`` tiles of
the other axis, so that tiles running at the same time share operands in L2 (the cost
model's order; ``scheduler_search.cost_model.grid``).
"""

from __future__ import annotations

from codegen.pipeline.code import Code
from codegen.pipeline.hooks import GridAxis
from scheduler_search.sprogram import Raster


def emit_tile_origin(code: Code, axes: tuple[GridAxis, GridAxis], raster: Raster) -> None:
    """``tile_origin(tile, <a>0, <b>0)``: the origin of the ``tile``-th tile of the order."""
    c = code
    by_name = {a.name: a for a in axes}
    major = by_name[raster.major]
    minor = next(a for a in axes if a is not major)
    c.comment(f"Raster: tiles along {major.name} first, in bands of {raster.swizzle} "
              f"tile(s) along the other axis (L2 reuse between concurrent tiles).")
    origins = ", ".join(f"int& {a.origin}" for a in axes)
    with c.block(f"__device__ __forceinline__ void tile_origin(int tile, {origins})"):
        c(f"constexpr int BAND = {raster.swizzle};")
        c(f"const int band = tile / (BAND * TILES_{major.const});")
        c(f"const int in_band = tile % (BAND * TILES_{major.const});")
        c(f"const int width = TILES_{minor.const} - band * BAND < BAND ? "
          f"TILES_{minor.const} - band * BAND : BAND;")
        c(f"const int t_{major.name} = in_band / width;")
        c(f"const int t_{minor.name} = band * BAND + in_band % width;")
        for axis in axes:
            c(f"{axis.origin} = t_{axis.name} * {axis.tile};")
    c("")
