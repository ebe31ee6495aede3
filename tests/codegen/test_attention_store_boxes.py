"""Attention's TMA stores land where its st.global stores write, worked out on the host.

The st.global paths (o's row pointer, the row's lse written by its first thread) are the
ones the GPU tests have checked against the reference. Here every consumer row of a tile,
in every layout, head packing and consumer split, is followed through the TMA path: its
place in the consumer's staged box (the order TMA reads shared memory: innermost box
dimension first), the box's coordinates and the map's strides give a global element; it
must be the element the st.global path writes for the same row. The C expressions the
kernel text holds are evaluated as Python integer arithmetic (every operand is
non-negative, so C's division is Python's floor division)."""

from __future__ import annotations

import itertools
import math
import re

import pytest

from codegen.kernels.attention_output import AttentionOutput
from codegen.kernels.attention_softmax import OnlineSoftmax


def _eval(expr: str, **names: int) -> int:
    """A kernel-text integer expression, evaluated with ``names``."""
    python = re.sub(r"\(unsigned long long\)", "", expr).replace("/", "//")
    return int(eval(python, {}, names))


def _box_element(dims: tuple[int, ...], strides: tuple[int, ...], box: tuple[int, ...],
                 origin: tuple[int, ...], index: int, elem_bytes: int) -> int:
    """The element (in units of the tensor's type) that box entry ``index`` (innermost
    dimension fastest) goes to, from the box's origin and the map's byte strides."""
    coords = []
    for extent in box:
        coords.append(index % extent)
        index //= extent
    element = 0
    byte_strides = (elem_bytes, *strides)
    for axis, (start, offset) in enumerate(zip(origin, coords, strict=True)):
        assert start + offset < dims[axis], "inside the tensor (no clipped rows here)"
        element += (start + offset) * byte_strides[axis] // elem_bytes
    return element


#: (layout, pack, tile_q, consumers, pingpong)
CONFIGS = [
    ("bshd", 1, 128, 2, False), ("bshd", 1, 192, 3, False), ("bshd", 1, 64, 2, True),
    ("bshd", 4, 64, 1, False), ("bshd", 2, 128, 2, False), ("bshd", 4, 128, 2, False),
    ("bhsd", 1, 128, 2, False), ("bhsd", 1, 64, 2, True), ("bhsd", 2, 128, 2, False),
    ("bhsd", 4, 64, 1, False), ("bhsd", 4, 128, 1, False), ("bhsd", 2, 256, 2, False),
]


@pytest.mark.parametrize(("layout", "pack", "tile_q", "consumers", "pingpong"), CONFIGS)
def test_each_consumer_row_is_stored_where_st_global_writes_it(
        layout: str, pack: int, tile_q: int, consumers: int, pingpong: bool) -> None:
    batch, heads, seq_q, head_dim = 2, 8, 512, 128
    params = {"batch": batch, "heads": heads, "kv_heads": heads // pack, "seq_q": seq_q,
              "seq_kv": seq_q, "head_dim": head_dim, "layout": layout}
    rows = tile_q if pingpong else tile_q // consumers
    output = AttentionOutput(params, 2, tile_q, pack, rows)
    assert output.store_problem() is None
    box = output.store_box()
    softmax = OnlineSoftmax("float16", None, None, heads_outer=layout == "bhsd" and pack > 1)
    consts = {"PACK": pack, "TILE_Q": tile_q, "HEADS": heads, "SEQ_Q": seq_q,
              "HEAD_DIM": head_dim, "CONSUMER_ROWS": rows}
    lse_index = _lse_staging_index(layout, pack)
    tiles_q = seq_q * pack // tile_q
    for q_tile, head_tile, batch0 in itertools.product(
            range(tiles_q), range(heads // pack), range(batch)):
        origin = {"q0": q_tile * tile_q, "heads0": head_tile * pack, "batch0": batch0, **consts}
        for consumer in range(1 if pingpong else consumers):
            row0 = 0 if pingpong else consumer * rows
            names = {**origin, "row0": row0}
            start = (0, *(_eval(e, **names) for e in box.row_coordinates))
            lse_start = tuple(_eval(e, **names) for e in _lse_coordinates(output))
            for local in range(rows):
                row = origin["q0"] + row0 + local  # the packed row of the tile
                expected = _eval(output.row_pointer().format(row=row).removeprefix("o + "),
                                 row=row, **names)
                stored = _box_element(box.global_dims, box.global_strides_bytes,
                                      (1, *box.row_box), start, local, 2)
                assert stored == expected, (q_tile, head_tile, consumer, local)
                staged = _eval(lse_index, lr=local, **names)
                lse_map = output.lse_map()
                lse_stored = _box_element(lse_map.global_dims, lse_map.global_strides_bytes,
                                          lse_map.box_dims, lse_start, staged, 4)
                assert lse_stored == _lse_st_global(softmax, row, names)


def _lse_staging_index(layout: str, pack: int) -> str:
    """The staging index the kernel text gives a warpgroup's row ``lr`` (the lse box's
    order), as :meth:`AttentionOutput.stage_lse` writes it."""
    from codegen.pipeline.code import Code

    class Rows:  # the target's accumulator-row loop, as one plain scope
        def accumulator_rows(self, code: Code) -> object:
            from contextlib import nullcontext
            return nullcontext()

    code = Code()
    AttentionOutput({"layout": layout, "head_dim": 128, "seq_q": 8, "heads": 8, "batch": 1},
                    2, 64, pack, 64).stage_lse(code, Rows(), "buf")  # type: ignore[arg-type]
    line = next(x for x in code.lines if "st_shared_f32" in x)
    return re.search(r"buf \+ 4 \* \((.*)\), lse_val", line).group(1)


def _lse_coordinates(output: AttentionOutput) -> tuple[str, ...]:
    """The lse box's coordinates as the kernel's store names them."""
    from codegen.pipeline.code import Code

    code = Code()
    output.store_lse(code, "buf")
    call = code.lines[0]
    args = call[call.index("(") + 1: call.rindex(")")].split(", ")
    return tuple(args[1:-1])


def _lse_st_global(softmax: OnlineSoftmax, row: int, names: dict[str, int]) -> int:
    """The lse element the row's first thread writes with st.global."""
    from codegen.pipeline.code import Code

    code = Code()
    softmax._write_lse(code, "0")
    line = next(x for x in code.lines if x.strip().startswith("lse["))
    index = line.strip()[len("lse["):line.strip().index("] =")]
    return _eval(index, row=row, **names)


def test_the_consumer_box_spans_its_rows_exactly() -> None:
    """A box holds one consumer's rows, no more, in every configuration above."""
    for layout, pack, tile_q, consumers, pingpong in CONFIGS:
        rows = tile_q if pingpong else tile_q // consumers
        output = AttentionOutput({"layout": layout, "head_dim": 128, "seq_q": 512, "heads": 8,
                                  "batch": 2}, 2, tile_q, pack, rows)
        assert math.prod(output.store_box().row_box) == rows
        assert math.prod(output.lse_map().box_dims) == rows
