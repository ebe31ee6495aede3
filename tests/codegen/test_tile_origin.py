"""The raster's tile origins, run on the host: the emitted ``tile_origin`` compiled with the
host C++ compiler and walked over every tile at sizes that do and do not fill the last
tile. A GEMM's last tile ends at the matrix's edge (its TMA boxes never cross it); an axis
without ``last_inside`` keeps whole-tile origins."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from codegen.pipeline.code import Code
from codegen.pipeline.hooks import GridAxis
from codegen.pipeline.raster import emit_tile_origin
from scheduler_search.cost_model.grid import tile_order
from scheduler_search.sprogram import Raster

CXX = shutil.which("g++") or shutil.which("c++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no host C++ compiler")

TILE_M, TILE_N, N = 64, 128, 384


def origins(tmp_path: Path, m_axis: GridAxis, n_axis: GridAxis, raster: Raster,
            sizes: list[int]) -> dict[int, list[tuple[int, int]]]:
    """``(m0, n0)`` of every tile at each run-time M, from the compiled ``tile_origin``."""
    code = Code()
    with code.block("void walk(int M)"):
        code(f"const int TILES_M = (M + {m_axis.tile - 1}) / {m_axis.tile};")
        code(f"const int TILES_N = {n_axis.tiles};")
        emit_tile_origin(code, (m_axis, n_axis), raster, in_kernel=True)
        with code.block("for (int tile = 0; tile < TILES_M * TILES_N; ++tile)"):
            code("int m0, n0;", "tile_origin(tile, m0, n0);",
                 'std::printf("%d %d %d\\n", M, m0, n0);')
    main = "int main() {\n" + "".join(f"  walk({m});\n" for m in sizes) + "}\n"
    source = tmp_path / "origins.cpp"
    source.write_text("#include <algorithm>\n#include <cstdio>\nusing std::min; using std::max;\n"
                      + code.text() + main)
    binary = tmp_path / "origins"
    subprocess.run([CXX, "-std=c++17", "-o", str(binary), str(source)], check=True)
    out = subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout
    found: dict[int, list[tuple[int, int]]] = {m: [] for m in sizes}
    for line in out.splitlines():
        m, m0, n0 = map(int, line.split())
        found[m].append((m0, n0))
    return found


@pytest.mark.parametrize("raster", [Raster("m"), Raster("n", 2)], ids=["m_first", "n_banded"])
def test_the_last_tile_ends_at_the_edge_and_every_row_is_covered(tmp_path: Path,
                                                                 raster: Raster) -> None:
    m_axis = GridAxis("m", 16384, TILE_M, runtime_extent="M", last_inside=True)
    n_axis = GridAxis("n", N, TILE_N, last_inside=True)
    sizes = [1, 17, 63, 64, 65, 68, 124, 255, 16383]
    for m, tiles in origins(tmp_path, m_axis, n_axis, raster, sizes).items():
        assert len(tiles) == -(-m // TILE_M) * (N // TILE_N)
        assert len(set(tiles)) == len(tiles), f"m={m}: a tile visited twice"
        rows = set()
        for m0, _ in tiles:
            if m >= TILE_M:
                assert 0 <= m0 <= m - TILE_M, f"m={m}: tile at {m0} crosses the edge"
            else:
                assert m0 == 0
            rows.update(range(m0, min(m0 + TILE_M, m)))
        assert rows == set(range(m)), f"m={m}: rows left out"
        last = max(m0 for m0, _ in tiles)
        assert last == max(m - TILE_M, 0)
        # Only the last tile leaves the grid of whole tiles.
        assert all(m0 % TILE_M == 0 for m0, _ in tiles if m0 != last)


def test_an_axis_without_last_inside_keeps_whole_tile_origins(tmp_path: Path) -> None:
    m_axis = GridAxis("m", 16384, TILE_M, runtime_extent="M")
    n_axis = GridAxis("n", N, TILE_N)
    for m, tiles in origins(tmp_path, m_axis, n_axis, Raster("m"), [68, 255]).items():
        assert sorted({m0 for m0, _ in tiles}) == list(range(0, m, TILE_M))


def test_a_compile_time_extent_that_tiles_evenly_is_left_as_it_was() -> None:
    code = Code()
    emit_tile_origin(code, (GridAxis("m", 256, 64, last_inside=True),
                            GridAxis("n", 200, 64, last_inside=True)), Raster("m"))
    text = code.text()
    assert "m0 = t_m * 64;" in text
    assert "n0 = min(t_n * 64, max(200 - 64, 0));" in text


def test_heaviest_first_walks_every_tile_once_in_the_cost_models_order(tmp_path: Path) -> None:
    """Causal tiles heaviest first across the grid: the query axis from its last tile
    back, outermost, batch and heads under it; the walk the kernel takes is the one the
    cost model dispatches (``tile_order``), so its makespan is of this kernel."""
    axes = (GridAxis("q", 1000, 128, heaviest_last=True), GridAxis("batch", 3, 1),
            GridAxis("heads", 4, 1))
    raster = Raster("q", 1, heaviest_first=True)
    code = Code()
    for axis in axes:
        code(f"constexpr int TILES_{axis.const} = {axis.tiles};")
    emit_tile_origin(code, axes, raster)
    source = tmp_path / "heaviest.cpp"
    source.write_text("#include <cstdio>\n#define __device__\n#define __forceinline__ inline\n"
                      + code.text() + "int main() {\n"
                      "  for (int tile = 0; tile < TILES_Q * TILES_BATCH * TILES_HEADS; ++tile) {\n"
                      "    int q0, batch0, heads0;\n    tile_origin(tile, q0, batch0, heads0);\n"
                      '    std::printf("%d %d %d\\n", q0, batch0, heads0);\n  }\n}\n')
    binary = tmp_path / "heaviest"
    subprocess.run([CXX, "-std=c++17", "-o", str(binary), str(source)], check=True)
    out = subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout
    walked = [tuple(map(int, line.split())) for line in out.splitlines()]
    assert len(walked) == len(set(walked)) == 8 * 3 * 4
    assert [q0 for q0, _, _ in walked] == sorted((q0 for q0, _, _ in walked), reverse=True)
    assert walked[0] == (7 * 128, 0, 0) and walked[1] == (7 * 128, 1, 0)  # batch fastest
    dims = {axis.name: axis.tiles for axis in axes}
    modelled = [(c["q"] * 128, c["batch"], c["heads"]) for c in tile_order(dims, raster, "q")]
    assert walked == modelled
    plane = [(c["q"] * 128, c["batch"], c["heads"])
             for c in tile_order(dims, Raster("q"), "q")]
    assert plane[:8] == [((7 - i) * 128, 0, 0) for i in range(8)]  # one head's, heaviest first
