"""The epilogue: a consumer warpgroup's fp32 accumulator to the output matrix.

Two emitters, one per sEU a store sTask can be mapped to:

- TMA (:func:`emit_tma_store`): registers -> swizzled shared memory (``stmatrix`` for 16-bit
  outputs, 8-byte ``st.shared`` for fp32, ``stmatrix.trans`` for a transposed fragment),
  one swizzle-span-wide sub-tile at a time -> ``cp.async.bulk.tensor`` store. The staging
  buffer is the idle ring stages (``operands``) or slots of its own (``ring``), as
  :attr:`PipelineLayout.staging` decides.
- CUDA cores (:func:`emit_direct_store`): two elements a thread with ``st.global``,
  clipped at the matrix edge.

Both read the MMA's accumulator layout (Hopper's: PTX ISA 9.7.15.5.1.1, "Register
Fragments"): thread ``lane`` of warp ``w`` holds rows ``16 w + lane / 4`` and ``+ 8`` of
each 64-row block, two adjacent columns per 8-column group. Both apply the operator's
element math (a fused epilogue: :class:`ElementMath`) to each pair just before it is
written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from codegen.artifact import TensorMapArg
from codegen.cuda import convert
from codegen.pipeline import split_k
from codegen.pipeline.limits import BAR_CONSUMERS, WARPGROUP, warpgroup_barrier

if TYPE_CHECKING:
    from codegen.pipeline.code import Code
    from codegen.pipeline.hooks import OutputTile
    from codegen.pipeline.layout import PipelineLayout

#: Writes math on ``v0, v1`` (fp32 lvalues in scope) given their output row and first
#: column (C++ expressions, global coordinates).
ElementMath = Callable[["Code", str, str], None]


def _pair(code: Code, element: ElementMath | None, lo: str, hi: str, row: str,
          col: str, name: str = "v") -> tuple[str, str]:
    """The pair ``lo, hi`` as it is written: itself, or fp32 temporaries ``name0, name1``
    after the element math."""
    if element is None:
        return lo, hi
    code(f"float {name}0 = {lo}, {name}1 = {hi};")
    if name == "v":
        element(code, row, col)
    else:
        with code.block(""):
            code(f"float& v0 = {name}0; float& v1 = {name}1;")
            element(code, row, col)
    return f"{name}0", f"{name}1"


def store_constants(code: Code, layout: PipelineLayout) -> None:
    """The staging constants of a TMA store."""
    out = layout.output
    code(f"constexpr int STORE_COLS = {layout.store_cols}, STORE_SUBTILES = "
         f"{layout.store_subtiles};  // {out.tensor} staged in {layout.store_cols}-column "
         f"sub-tiles ({layout.staging})")
    code(f"constexpr u32 C_ROW_BYTES = {layout.store_cols * out.elem_bytes}, "
         f"C_SLOT_BYTES = {layout.c_slot_bytes};")
    if out.transposed:
        code(f"constexpr u32 C_BLOCK_BYTES = {layout.c_block_bytes};  // one consumer's 64 "
             f"fragment rows as {out.cols} output rows")
    if layout.hooks.side_outputs_staged:
        row_bytes = layout.structure.graph.side_row_bytes
        code(f"constexpr u32 SIDE_SLOT_BYTES = {out.rows * row_bytes};  // the tile's rows' "
             "side outputs, staged with it")


def store_tensor_map(layout: PipelineLayout) -> TensorMapArg:
    """The output's tensor map: one box is one consumer's rows of one sub-tile (of a
    transposed fragment: one 64-row block, as the output's rows of 64 columns)."""
    out = layout.output
    if out.store_box is not None:
        return TensorMapArg(
            name=out.map_name, tensor=out.tensor, dtype=out.dtype,
            global_dims=out.store_box.global_dims,
            global_strides_bytes=out.store_box.global_strides_bytes,
            box_dims=(layout.store_cols, *out.store_box.row_box),
            swizzle=layout.store_swizzle.tma,  # type: ignore[arg-type]
        )
    if out.transposed:  # the fragment's rows are the output's columns
        dims, box = (out.global_rows, out.global_cols), (layout.store_cols, out.cols)
    else:
        dims, box = (out.global_cols, out.global_rows), (layout.store_cols, layout.consumer_rows)
    return TensorMapArg(
        name=out.map_name,
        tensor=out.tensor,
        dtype=out.dtype,
        global_dims=dims,
        global_strides_bytes=(dims[0] * out.elem_bytes,),
        box_dims=box,
        swizzle=layout.store_swizzle.tma,  # type: ignore[arg-type]
    )


def _staging_buffer(code: Code, layout: PipelineLayout, bar: str) -> None:
    """``buf``: where this warpgroup stages sub-tile ``s``, once it is free again."""
    c = code
    # A consumer's part of a slot: its rows, or its block of a transposed fragment.
    mine = ("consumer * C_BLOCK_BYTES" if layout.output.transposed
            else "row0 * C_ROW_BYTES")
    if layout.staging == "operands":
        c(f"const u32 buf = smem + SMEM_C + s * C_SLOT_BYTES + {mine};")
    elif layout.structure.pingpong:
        c("const u32 buf = smem + SMEM_C + consumer * C_SLOT_BYTES;")
        c.comment("this warpgroup's previous store finished reading its slot")
        c("if (thread_in_wg == 0) " + c.call("tma_store_wait_reads<0>") + ";")
        c(c.call("named_barrier_sync", bar, WARPGROUP) + ";")
    else:
        c(f"const u32 buf = smem + SMEM_C + (store_round % 2) * C_SLOT_BYTES + {mine};")
        c.comment("the store that last used this slot finished reading it")
        c("if (thread_in_wg == 0) " + c.call("tma_store_wait_reads<1>") + ";")
        c(c.call("named_barrier_sync", bar, WARPGROUP) + ";")


def _side_buffer(layout: PipelineLayout) -> str:
    """Where this warpgroup stages its rows' side outputs: the slot of the tile's first
    sub-tile (so the staging's waits free it too); rows of the graph's ``side_row_bytes``,
    as the shared-memory plan sizes the slots."""
    row_bytes = layout.structure.graph.side_row_bytes
    if layout.staging == "operands":
        return f"smem + SMEM_SIDE + row0 * {row_bytes}"
    if layout.structure.pingpong:
        return "smem + SMEM_SIDE + consumer * SIDE_SLOT_BYTES"
    return f"smem + SMEM_SIDE + (store_round % 2) * SIDE_SLOT_BYTES + row0 * {row_bytes}"


def emit_tma_store(code: Code, layout: PipelineLayout,
                   element: ElementMath | None = None) -> None:
    """Registers -> swizzled staging (stmatrix, or st.shared for fp32) -> TMA store, sub-tile
    by sub-tile; ``element`` applied to each pair on its way."""
    c, out = code, layout.output
    swz = layout.store_swizzle
    staging = ("stmatrix.trans" if out.transposed
               else "8-byte st.shared" if out.dtype == "float32" else "stmatrix")
    c.comment(f"store: {out.fragment} -> shared memory ({staging}, {swz.span_bytes}B swizzle) "
              f"-> {out.tensor} via TMA, {layout.store_cols}-column sub-tiles")
    if layout.staging == "operands":
        c.comment("every consumer finished reading the operand stages, which now stage the tile")
        c(c.call("named_barrier_sync", BAR_CONSUMERS, "CONSUMERS * 128") + ";")
    bar = warpgroup_barrier(layout.structure.consumers)
    side = layout.hooks.side_outputs_staged
    if side:
        c(f"const u32 side_buf = {_side_buffer(layout)};  // staged with sub-tile 0")
    c("#pragma unroll")
    with c.block("for (int s = 0; s < STORE_SUBTILES; ++s)"):
        if split_k.scattered(layout):
            split_k.emit_skip_unowned(c, "s")
        _staging_buffer(c, layout, bar)
        if side:
            with c.block("if (s == 0)"):
                layout.hooks.stage_side_outputs(c, "side_buf")
        if out.transposed:
            _stage_transposed(c, layout, element)
        elif out.dtype == "float32":
            _stage_fp32_pairs(c, layout, element)
        else:
            _stage_stmatrix(c, layout, element)
        c(c.call("fence_proxy_async_smem") + ";")
        c(c.call("named_barrier_sync", bar, WARPGROUP) + ";")
        with c.block("if (thread_in_wg == 0)"):
            c(c.call(*_store_call(out), "buf") + ";")
            if side:
                with c.block("if (s == 0)"):
                    layout.hooks.store_side_outputs(c, "side_buf")
            c(c.call("tma_store_commit") + ";")
        if layout.staging == "ring" and not layout.structure.pingpong:
            c("++store_round;")


def _store_call(out: OutputTile) -> tuple[str, ...]:
    """The TMA store of a consumer's sub-tile ``s``: the function, its map, its box's
    coordinates."""
    box = out.store_box
    if box is not None:
        return (f"tma_store_{box.rank}d", f"&{out.map_name}",
                f"{out.col_origin} + s * STORE_COLS", *box.row_coordinates)
    if out.transposed:  # block s of this consumer's rows: 64 output columns
        origin = (f"{out.row_origin} + row0 + s * STORE_COLS", out.col_origin)
    else:
        origin = (f"{out.col_origin} + s * STORE_COLS", f"{out.row_origin} + row0")
    return ("tma_store_2d", f"&{out.map_name}", *origin)


def _stage_stmatrix(code: Code, layout: PipelineLayout, element: ElementMath | None) -> None:
    """16-bit outputs: each 16x16 block of sub-tile ``s`` with one ``stmatrix`` (its four
    pairs: rows +0 and +8 of 8-column groups ``group`` and ``group + 1``)."""
    c, out, swz = code, layout.output, layout.store_swizzle
    pack = convert.pack2(out.dtype)
    c("#pragma unroll")
    with c.block("for (int mi = 0; mi < ROW_BLOCKS; ++mi)"):
        c("#pragma unroll")
        with c.block("for (int j = 0; j < STORE_COLS / 16; ++j)"):
            c.comment("16x16 of the tile: lane/8 picks the 8x8 matrix (bit 0: +8 rows, "
                      "bit 1: +8 columns)")
            c("const int group = s * (STORE_COLS / 8) + 2 * j;  // 8-column group in tile")
            c("const int row = mi * 64 + warp * 16 + (lane & 8) + (lane & 7);")
            c("const u32 col_bytes = (2 * j + (lane >> 4)) * 16;")
            regs = []
            for i in range(4):
                lo, hi = _pair(c, element, f"{out.fragment}[mi][4 * group + {2 * i}]",
                               f"{out.fragment}[mi][4 * group + {2 * i + 1}]",
                               _tile_row(out, str(i % 2)), _tile_col(out, f"group + {i // 2}"),
                               name=f"p{i}_")
                regs.append(c.call(pack, lo, hi))
            addr = f"buf + {c.call(swz.function, 'row * C_ROW_BYTES + col_bytes')}"
            c(c.call("stmatrix_x4", addr, *regs) + ";")


def _stage_transposed(code: Code, layout: PipelineLayout, element: ElementMath | None) -> None:
    """A transposed fragment's 64-row block ``s`` (``swap_ab``: rows along n, columns
    along m) staged as the output's rows: ``stmatrix.trans`` stores each 8x8 matrix of
    pairs as its transpose, so lane ``l`` addresses output row ``8 group + l % 8`` (a
    fragment column) at the 16 bytes of the 8 fragment rows the matrix holds (output
    columns). Sixteen fragment columns a ``.x4``; an odd last 8-column group a ``.x2``.
    ``element`` may read no position (as the direct transposed store's)."""
    c, out, swz = code, layout.output, layout.store_swizzle
    pack = convert.pack2(out.dtype)
    groups = out.cols // 8

    def stage(first_group: str, matrices: int) -> None:
        regs = []
        for i in range(matrices):  # matrix i: rows +8 (i & 1) of 8-column group i / 2
            index = f"4 * ({first_group} + {i // 2}) + {2 * (i % 2)}"
            lo, hi = _pair(c, element, f"{out.fragment}[s][{index}]",
                           f"{out.fragment}[s][{index} + 1]", "0", "0", name=f"p{i}_")
            regs.append(c.call(pack, lo, hi))
        c(f"const int out_row = ({first_group} + (lane >> 4)) * 8 + (lane & 7);  "
          "// a fragment column")
        c("const u32 col_bytes = (warp * 16 + ((lane >> 3) & 1) * 8) * 2;  // its 8 rows")
        addr = f"buf + {c.call(swz.function, 'out_row * C_ROW_BYTES + col_bytes')}"
        c(c.call(f"stmatrix_x{matrices}_trans", addr, *regs) + ";")

    c("#pragma unroll")
    with c.block(f"for (int j = 0; j < {groups // 2}; ++j)"):
        stage("2 * j", 4)
    if groups % 2:
        with c.block(""):
            stage(str(groups - 1), 2)


def _stage_fp32_pairs(code: Code, layout: PipelineLayout, element: ElementMath | None) -> None:
    """fp32 outputs (stmatrix moves 16-bit elements only): each thread's two adjacent
    accumulators per row and 8-column group with one 8-byte ``st.shared``; the swizzle
    spreads a warp's eight rows over distinct 16-byte chunks."""
    c, out, swz = code, layout.output, layout.store_swizzle
    with layout.hooks.target.accumulator_rows(c):
        c("const int row = mi * 64 + warp * 16 + h * 8 + (lane >> 2);")
        c("#pragma unroll")
        with c.block("for (int j = 0; j < STORE_COLS / 8; ++j)"):
            c("const int group = s * (STORE_COLS / 8) + j;  // 8-column group in tile")
            c("const u32 col_bytes = (j * 8 + (lane & 3) * 2) * 4;")
            addr = f"buf + {c.call(swz.function, 'row * C_ROW_BYTES + col_bytes')}"
            lo, hi = _pair(c, element, f"{out.fragment}[mi][4 * group + 2 * h]",
                           f"{out.fragment}[mi][4 * group + 2 * h + 1]",
                           f"({out.row_origin} + row0 + row)", _tile_col(out, "group"))
            c(c.call("st_shared_f32x2", addr, lo, hi) + ";")


def _tile_row(out: OutputTile, h: str) -> str:
    """The global row of a thread's pair in half ``h`` (0: rows +0, 1: +8) of block ``mi``."""
    return f"({out.row_origin} + row0 + mi * 64 + warp * 16 + {h} * 8 + (lane >> 2))"


def _tile_col(out: OutputTile, group: str) -> str:
    """The global first column of a thread's pair in 8-column group ``group`` of the tile."""
    return f"({out.col_origin} + ({group}) * 8 + (lane & 3) * 2)"


@contextmanager
def _each_fragment_row(code: Code, layout: PipelineLayout, name: str, *, masked: bool,
                       note: str = "") -> Iterator[None]:
    """The loops over a thread's fragment rows (its MMA's 64-row blocks, then their two
    8-row halves), ``name`` the row's index in the fragment's global matrix; rows past
    its extent are skipped when ``masked``."""
    c, out = code, layout.output
    with layout.hooks.target.accumulator_rows(c):
        c(f"const int {name} = {out.row_origin} + row0 + mi * 64 + warp * 16 + h * 8 + "
          f"(lane >> 2);{note}")
        if masked:
            c(f"if ({name} >= {out.extent_names[0]}) continue;")
        yield


def emit_direct_store(code: Code, layout: PipelineLayout,
                      element: ElementMath | None = None) -> None:
    """st.global from registers, two elements a thread per 8-column group; ``element``
    applied to each pair first."""
    c, out = code, layout.output
    if out.transposed:
        _emit_transposed_store(code, layout, element)
        return
    cols = out.extent_names[1]
    c.comment(f"store: {out.fragment} -> {out.tensor} with st.global, two elements a thread "
              "per 8-column group")
    full_rows = not out.runtime_rows and out.global_rows % out.rows == 0
    with _each_fragment_row(c, layout, "row", masked=not full_rows):
        row_pointer = out.row_pointer or f"{out.tensor} + (unsigned long long){{row}} * {cols}"
        c(f"{out.ctype}* out_row = {row_pointer.format(row='row')};")
        second = out.second
        first_cols = second.first_cols if second else out.cols
        _store_columns(c, layout, element, out.fragment, "out_row", first_cols)
        if second is not None:
            c.comment(f"the tile's columns from {first_cols} on: {second.fragment} -> "
                      f"{second.tensor}")
            c(f"{out.ctype}* second_row = {second.row_pointer.format(row='row')};")
            _store_columns(c, layout, None, second.fragment, "second_row",
                           out.cols - first_cols)


def _store_columns(code: Code, layout: PipelineLayout, element: ElementMath | None,
                   fragment: str, row: str, tile_cols: int) -> None:
    """A thread's pairs of ``tile_cols`` columns of ``fragment`` (a row of it) to the row
    at ``row``, two elements a thread per 8-column group."""
    c, out = code, layout.output
    pack = convert.pack2(out.dtype) if out.dtype != "float32" else ""
    cols = out.extent_names[1]
    full_cols = out.global_cols % out.cols == 0
    c("#pragma unroll")
    with c.block(f"for (int j = 0; j < {tile_cols // 8}; ++j)"):
        if split_k.scattered(layout):
            split_k.emit_skip_unowned(c, split_k.fragment_share(layout, "mi", "j"))
        origin = out.col_origin if row == "out_row" else "0"
        c(f"const int col = {origin} + j * 8 + (lane & 3) * 2;")
        lo, hi = _pair(c, element, f"{fragment}[mi][4 * j + 2 * h]",
                       f"{fragment}[mi][4 * j + 2 * h + 1]", "row", "col")
        if out.dtype == "float32" and out.global_cols % 2 == 0:
            store = f"*reinterpret_cast<float2*>({row} + col) = make_float2({lo}, {hi});"
            c(store if full_cols else f"if (col < {cols}) {store}")
        elif out.global_cols % 2 == 0:
            store = (f"*reinterpret_cast<u32*>({row} + col) = "
                     f"{c.call(pack, lo, hi)};")
            c(store if full_cols else f"if (col < {cols}) {store}")
        else:
            single = convert.single(out.dtype)
            c(f"if (col < {cols}) {row}[col] = {c.call(single, lo)};")
            c(f"if (col + 1 < {cols}) {row}[col + 1] = {c.call(single, hi)};")


def _emit_transposed_store(code: Code, layout: PipelineLayout,
                           element: ElementMath | None = None) -> None:
    """st.global of a transposed fragment: a thread's pair (columns c, c + 1 of fragment
    row r) goes to two global rows, one element each; the eight rows a warp's lanes hold
    for one column are contiguous in memory (16 bytes of 16-bit outputs).

    ``element`` is applied to each pair first, with the pair's global row ``g`` and column
    ``r``; the pair's second element is at row ``g + 1`` of the same column, not at the
    next column, so only element math that reads no position (a scale, an activation)
    may be given here: an operator keeps bias and residual epilogues from transposed
    stores (GEMM's ``swap_ab`` refuses them)."""
    c, out = code, layout.output
    rows, cols = out.extent_names  # the fragment's: global columns, then global rows
    single = convert.single(out.dtype) if out.dtype != "float32" else ""
    c.comment(f"store: {out.fragment} transposed -> {out.tensor} with st.global, one element "
              "a global row")
    full_rows = out.global_rows % out.rows == 0
    full_cols = not out.runtime_cols and out.global_cols % out.cols == 0
    with _each_fragment_row(c, layout, "r", masked=not full_rows,
                            note="  // the global column"):
        c("#pragma unroll")
        with c.block(f"for (int j = 0; j < {out.cols // 8}; ++j)"):
            if split_k.scattered(layout):
                split_k.emit_skip_unowned(c, split_k.fragment_share(layout, "mi", "j"))
            c(f"const int g = {out.col_origin} + j * 8 + (lane & 3) * 2;  // global row")
            pair = _pair(c, element, f"{out.fragment}[mi][4 * j + 2 * h]",
                         f"{out.fragment}[mi][4 * j + 2 * h + 1]", "g", "r")
            for e, value in enumerate(pair):
                if single:
                    value = c.call(single, value)
                store = f"{out.tensor}[(unsigned long long)(g + {e}) * {rows} + r] = {value};"
                c(store if full_cols else f"if (g + {e} < {cols}) {store}")
