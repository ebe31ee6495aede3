"""The chunk state fused with the state passing (``pass_states``): one output tile of
(head, p) x n walks every chunk of its (batch, head) in order, and carries the running
state in registers instead of writing each chunk's state for ``_state_passing_fwd`` to read
back and write again.

With ``r`` the state entering chunk c (``initial_states``, or zeros, entering the first):
``states[c] = r``; after the chunk's last trip ``r = exp(dA_c[L-1]) r + S_c``, ``S_c`` the
chunk's product (the accumulators, restarted at each chunk's first trip). The state after
the last chunk is the epilogue's output, ``final_states``. Text written here:

- the loop's constants (``TRIPS``: the whole sequence, ``L_TILES`` a chunk) and the running
  state's registers;
- ``begin_tile``: ``r`` from ``initial_states`` or zeros, written as the first chunk's state;
- ``pass_state``: at a chunk's last trip, the update of ``r``;
- ``store_state`` (a store of the loop): ``r`` as the next chunk's state, in the states'
  dtype, from the accumulator layout (``Mma`` fragment: rows ``warp*16 + lane/4 (+8)``,
  columns ``8g + 2(lane%4)``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from codegen.cuda import convert
from codegen.pipeline import Code, TripAt

if TYPE_CHECKING:
    from codegen.kernels.mamba2.chunk_state import ChunkStateHooks


class StatePassing:
    """The state passing's text inside a chunk-state kernel."""

    def __init__(self, hooks: ChunkStateHooks) -> None:
        self.hooks = hooks
        params = hooks.params
        self.states_dtype = "float32" if params.get("states_in_fp32", True) else hooks.dtype
        self.initial = bool(params.get("initial_states", False))
        self.packed_sequences = bool(params.get("seq_idx", False))

    def constants(self, code: Code) -> None:
        code("constexpr int TRIPS = NCHUNKS * L_TILES;  // the loop walks every chunk in order")

    def consumer_state(self, code: Code) -> None:
        code("float run[ROW_BLOCKS][ACC_REGS];  // the state entering the chunk, fp32")
        if self.packed_sequences:
            code("int seq_run;  // the sequence the last chunk ended in (0 before the first)")

    def chunk_end(self, at: TripAt) -> str:
        """True on a chunk's last trip (C++)."""
        return f"(({at.index}) + 1) % L_TILES == 0"

    def begin_tile(self, code: Code) -> None:
        c = code
        c.comment("the state entering the first chunk: initial_states, or zeros; it is the "
                  "first chunk's states")
        if self.packed_sequences:
            c("seq_run = 0;  // initial_states belong to sequence 0")
        with _elements(c):
            if self.initial:
                c("const float2 v = __ldg(reinterpret_cast<const float2*>(initial_states + "
                  "(((unsigned long long)batch0 * NHEADS + heads0) * HEADDIM + p0 + r) * DSTATE "
                  "+ col));")
                c("run[mi][4 * g + 2 * h] = v.x; run[mi][4 * g + 2 * h + 1] = v.y;")
            else:
                c("run[mi][4 * g + 2 * h] = 0.0f; run[mi][4 * g + 2 * h + 1] = 0.0f;")
        self._store(c, "0")

    def pass_state(self, code: Code, at: TripAt, exp2: str) -> None:
        c = code
        c.comment("at the chunk's last trip: r = exp(dA[L-1]) r + the chunk's state")
        with c.block(f"if ({self.chunk_end(at)})"):
            carry = ""
            if self.packed_sequences:
                c.comment("a chunk that ends in another sequence than the last one carries "
                          "nothing over")
                c("const int seq_end = __ldg(seq_idx + (unsigned long long)batch0 * SEQLEN + "
                  f"(({at.index}) / L_TILES + 1) * CHUNK - 1);")
                c("const bool carried = seq_end == seq_run;")
                c("seq_run = seq_end;")
                carry = "carried ? "
            c("#pragma unroll")
            with c.block("for (int mi = 0; mi < ROW_BLOCKS; ++mi)"):
                decay = f"{exp2}(dA_last[mi] * LOG2E)"
                c(f"const float decay = {carry}{decay}{' : 0.f' if carry else ''};")
                c("#pragma unroll")
                c("for (int i = 0; i < ACC_REGS; ++i) run[mi][i] = fmaf(decay, run[mi][i], "
                  "acc[mi][i]);")

    def store_state(self, code: Code, at: TripAt) -> None:
        c = code
        c.comment("r, after the chunk's last trip, is the state entering the next chunk")
        with c.block(f"if ({self.chunk_end(at)} && ({at.index}) + 1 < TRIPS)"):
            self._store(c, f"(({at.index}) + 1) / L_TILES")

    def _store(self, code: Code, chunk: str) -> None:
        """``run`` as the states entering chunk ``chunk`` (st.global, pairs of columns;
        the tile's packed heads are consecutive rows of the (batch, chunk, head, p) rows)."""
        c, dtype = code, self.states_dtype
        with _elements(c):
            c(f"const unsigned long long at = ((((unsigned long long)batch0 * NCHUNKS + {chunk}) "
              "* NHEADS + heads0) * HEADDIM + p0 + r) * DSTATE + col;")
            first, second = "run[mi][4 * g + 2 * h]", "run[mi][4 * g + 2 * h + 1]"
            if dtype == "float32":
                c(f"*reinterpret_cast<float2*>(states + at) = make_float2({first}, {second});")
            else:
                c(f"*reinterpret_cast<u32*>(states + at) = "
                  f"{c.call(convert.pack2(dtype), first, second)};")


@contextlib.contextmanager
def _elements(code: Code) -> Iterator[None]:
    """``for mi, h, g``: this thread's accumulator pairs, ``r`` the tile row of the first
    of each pair and ``col`` its n."""
    with contextlib.ExitStack() as loops:
        for loop in ("for (int mi = 0; mi < ROW_BLOCKS; ++mi)", "for (int h = 0; h < 2; ++h)",
                     "for (int g = 0; g < ACC_REGS / 4; ++g)"):
            code("#pragma unroll")
            loops.enter_context(code.block(loop))
        code("const int r = row0 + mi * 64 + warp * 16 + h * 8 + (lane >> 2);")
        code("const int col = n0 + 8 * g + 2 * (lane & 3);")
        yield
