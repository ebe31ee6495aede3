"""The raster: which output tile a block works on next, as the sProgram orders them.

Tiles are visited along ``raster.major`` first, in bands of ``raster.swizzle`` tiles of
the other axis, so that tiles running at the same time share operands in L2 (the cost
model's order; ``scheduler_search.cost_model.grid``); along an axis whose tiles grow
heavier (``GridAxis.heaviest_last``), from its last tile back; with ``heaviest_first``,
the uneven axis (``heaviest_last`` or ``lightest_last``) outermost, heaviest tiles first.
"""

from __future__ import annotations

from codegen.pipeline.code import Code
from codegen.pipeline.hooks import GridAxis
from scheduler_search.sprogram import Cluster, Raster


def emit_tile_origin(code: Code, axes: tuple[GridAxis, ...], raster: Raster,
                     cluster: Cluster | None = None, *, in_kernel: bool = False) -> None:
    """``tile_origin(tile, <a>0, <b>0, ...)``: the origin of the ``tile``-th tile of the
    order. The raster walks the first two axes; further axes (attention's heads) are outer:
    one whole raster plane after another. With a cluster, the order is over the clusters'
    tiles (``cluster.size`` neighbours along its axis, in the plane or outer, as the chunk
    state's heads), and a block takes the one of its rank. ``in_kernel``: a lambda in the
    kernel's body, reading tile counts the kernel computes from its size arguments."""
    c = code
    plane = axes[:2]
    by_name = {a.name: a for a in plane}
    major = by_name[raster.major]
    minor = next(a for a in plane if a is not major)

    def count(axis: GridAxis) -> str:
        """The axis's tiles in the order (clusters' tiles along the cluster axis)."""
        clustered = cluster is not None and axis.name == cluster.axis
        return f"(TILES_{axis.const} / CLUSTER)" if clustered else f"TILES_{axis.const}"

    def origin(axis: GridAxis, t: str) -> str:
        if cluster is None or axis.name != cluster.axis:
            start = f"{t} * {axis.tile}"
        else:
            start = f"({t} * CLUSTER + (int){c.call('cluster_ctarank')}) * {axis.tile}"
        if not axis.last_inside or (not axis.runtime and axis.extent % axis.tile == 0):
            return start
        # The last tile ends at the extent (an extent under one tile keeps origin 0).
        return f"min({start}, max({axis.extent_expr} - {axis.tile}, 0))"

    origins = ", ".join(f"int& {a.origin}" for a in axes)
    head = (f"auto tile_origin = [&](int tile, {origins})" if in_kernel
            else f"__device__ __forceinline__ void tile_origin(int tile, {origins})")
    if raster.heaviest_first:
        heavy = next(a for a in axes if a.heaviest_last or a.lightest_last)
        rest = [a for a in axes if a is not heavy]
        walk = "from its last tile back" if heavy.heaviest_last else "from its first tile"
        c.comment(f"Raster: the heaviest tiles first across the grid: {heavy.name} {walk}, "
                  f"outermost; {', '.join(a.name for a in rest)} under it (the first fastest).")
        with c.block(head, tail="};" if in_kernel else "}"):
            others = " * ".join(count(a) for a in rest)
            t = (f"({count(heavy)} - 1 - tile / ({others}))" if heavy.heaviest_last
                 else f"(tile / ({others}))")
            c(f"{heavy.origin} = {origin(heavy, t)};")
            c(f"tile %= {others};")
            for i, axis in enumerate(rest):
                c(f"{axis.origin} = {origin(axis, f'(tile % {count(axis)})')};")
                if i < len(rest) - 1:
                    c(f"tile /= {count(axis)};")
        c("")
        return
    c.comment(f"Raster: tiles along {major.name} first, in bands of {raster.swizzle} "
              f"tile(s) along the other axis (L2 reuse between concurrent tiles).")
    with c.block(head, tail="};" if in_kernel else "}"):
        if len(axes) > 2:
            c(f"int outer = tile / (TILES_{plane[0].const} * TILES_{plane[1].const});")
            c(f"tile %= TILES_{plane[0].const} * TILES_{plane[1].const};")
            for axis in axes[2:]:
                t = f"(outer % {count(axis)})"
                if axis.heaviest_last:
                    t = f"({count(axis)} - 1 - {t})"
                c(f"{axis.origin} = {origin(axis, t)};")
                c(f"outer /= {count(axis)};")
        c(f"constexpr int BAND = {raster.swizzle};")
        c(f"const int band = tile / (BAND * {count(major)});")
        c(f"const int in_band = tile % (BAND * {count(major)});")
        c(f"const int width = {count(minor)} - band * BAND < BAND ? "
          f"{count(minor)} - band * BAND : BAND;")
        c(f"const int t_{major.name} = in_band / width;")
        c(f"const int t_{minor.name} = band * BAND + in_band % width;")
        for axis in plane:
            t = (f"({count(axis)} - 1 - t_{axis.name})" if axis.heaviest_last
                 else f"t_{axis.name}")
            c(f"{axis.origin} = {origin(axis, t)};")
    c("")
