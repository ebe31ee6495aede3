"""Attention's online softmax: the register math of a consumer warpgroup's rows.

Kept apart from :mod:`codegen.kernels.attention` (tiles, loads, matrix products) because
it is the one part that works on the accumulators' values rather than on shared memory:
per loop trip ``softmax_max`` (masking, the running row max, ``alpha``),
``softmax_exp2``, ``softmax_sum`` and ``rescale`` (which also packs P for ``mma_pv``);
per output tile ``normalize`` (``O / l`` and the log-sum-exp side output).

A thread holds two rows of each 64-row block (``lane / 4`` and ``+ 8``): their statistics
are ``m_row``, ``l_row`` and ``alpha[ROW_BLOCKS][2]``, which the four threads of a row
combine with shuffles.
"""

from __future__ import annotations

import math

from codegen.cuda import convert
from codegen.pipeline import Code, TripAt
from codegen.targets import Target
from scheduler_search.hardware.model import UnitKind

#: fp32 -inf and +inf, spelled without math headers (NVRTC has none).
NEG_INF = "__int_as_float(0xff800000)"
POS_INF = "__int_as_float(0x7f800000)"
LN2 = math.log(2.0)


class OnlineSoftmax:
    """The softmax sTasks of one attention kernel: ``dtype`` is what P is packed to for
    the MMA, ``exp2_unit`` the sEU the sProgram maps ``softmax_exp2`` to, ``target`` the
    architecture whose accumulator fragment the scores are in."""

    def __init__(self, dtype: str, exp2_unit: UnitKind, target: Target,
                 heads_outer: bool = False, lse_staged: bool = False,
                 scaled_inputs: bool = False) -> None:
        self.dtype = dtype
        #: FP8: the scores' scale takes q's and k's (``scale_log2``, read at the kernel's
        #: start), O is times v's (``v_scale0``), and P is packed as e4m3 quads.
        self.scaled_inputs = scaled_inputs
        self.scale = "scale_log2" if scaled_inputs else "SCALE_LOG2"
        self.exp2_unit = exp2_unit
        self.target = target
        #: The log-sum-exp is kept in ``lse_val`` for the output's TMA store to stage,
        #: else written by the row's first thread with st.global.
        self.lse_staged = lse_staged
        #: Packed rows lie head by head (bhsd: a tile is PACK runs of TILE_Q / PACK
        #: positions), else position by position (bshd: row r is position r / PACK of
        #: head heads0 + r % PACK).
        self.heads_outer = heads_outer

    def position(self, local: str) -> str:
        """The query position of the tile's packed row ``local`` (from the tile's first)."""
        if self.heads_outer:
            return f"q0 / PACK + ({local}) % (TILE_Q / PACK)"
        return f"(q0 + {local}) / PACK"

    def each_score(self, code: Code, body: list[str], after: list[str] | None = None,
                   before: list[str] | None = None) -> None:
        """``body`` for every score of this thread: ``s`` is ``s_acc[mi][4 g + 2 h + e]``;
        ``before`` and ``after`` run once per row (``mi``, ``h``) around its scores."""
        self.target.each_accumulator_value(
            code, "S_REGS", "e", ["float& s = s_acc[mi][4 * g + 2 * h + e];", *body],
            before, after)

    def write(self, code: Code, stask: str, at: TripAt) -> None:
        """Write the register-math sTask ``stask`` for loop trip ``at``."""
        {
            "softmax_max": self.softmax_max,
            "softmax_exp2": self.softmax_exp2,
            "softmax_sum": self.softmax_sum,
            "rescale": self.rescale,
            "normalize": self.normalize,
        }[stask](code, at)

    def begin_tile(self, code: Code) -> None:
        """Reset the row statistics for a new output tile: max -inf, sum 0."""
        c = code
        c.comment("row statistics of the new tile: max -inf, sum 0")
        c("#pragma unroll")
        with c.block("for (int mi = 0; mi < ROW_BLOCKS; ++mi)"):
            c(f"m_row[mi][0] = m_row[mi][1] = {NEG_INF};")
            c("l_row[mi][0] = l_row[mi][1] = 0.f;")

    def _exp2(self, code: Code) -> str:
        """The exp2 of the sEU ``softmax_exp2`` is mapped to: ``ex2.approx`` on the SFU,
        ``exp2f`` on the CUDA cores."""
        if self.exp2_unit is UnitKind.SFU:
            code.use("exp2_approx")
            return "exp2_approx"
        return "exp2f"

    def softmax_max(self, code: Code, at: TripAt) -> None:
        """Mask (only on the tiles that cross the diagonal or the end of the keys), then the
        row max of the raw scores and ``alpha``, the factor that rescales what came before;
        the scale by log2(e)/sqrt(d) is folded into softmax_exp2's FMA."""
        c = code
        exp2 = self._exp2(c)
        c.comment("masked: keys past SEQ_KV, and with CAUSAL key > query")
        c(f"const int kv0 = {at.index} * TILE_KV;")
        first = "q0 / PACK" if self.heads_outer else "(q0 + row0) / PACK"  # the least position
        c("const bool masked = kv0 + TILE_KV > SEQ_KV || (CAUSAL && kv0 + TILE_KV - 1 > "
          f"{first});")
        with c.block("if (masked)"):
            local = "row0 + mi * 64 + warp * 16 + h * 8 + (lane >> 2)"
            self.each_score(
                c,
                before=[f"const int row = {self.position(local)};  // the query position"],
                body=["const int col = kv0 + g * 8 + (lane & 3) * 2 + e;",
                      f"if (col >= SEQ_KV || (CAUSAL && col > row)) s = {NEG_INF};"])
        self.each_score(
            c,
            before=["float mx = m_row[mi][h];"],
            body=["mx = fmaxf(mx, s);"],
            after=["mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));  // the row's 4 threads",
                   "mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));",
                   f"const float m_new = mx == {NEG_INF} ? 0.f : mx;  // a row with no key yet",
                   f"alpha[mi][h] = {exp2}((m_row[mi][h] - m_new) * {self.scale});  // rescales "
                   "what came before",
                   "m_row[mi][h] = m_new;"],
        )

    def softmax_exp2(self, code: Code, at: TripAt) -> None:
        """``2^(s c - m c)`` in place of each score, one FMA (``c = SCALE_LOG2``)."""
        exp2 = self._exp2(code)
        self.each_score(code, before=[f"const float m_scaled = m_row[mi][h] * {self.scale};"],
                   body=[f"s = {exp2}(fmaf(s, {self.scale}, -m_scaled));  // exp(s - m) in "
                         "base 2, one FMA"])

    def softmax_sum(self, code: Code, at: TripAt) -> None:
        """This thread's part of the row sum; ``normalize`` adds the row's four parts."""
        self.each_score(code, before=["float sum = 0.f;"], body=["sum += s;"],
                   after=["l_row[mi][h] = l_row[mi][h] * alpha[mi][h] + sum;  // this "
                          "thread's part"])

    def rescale(self, code: Code, at: TripAt) -> None:
        """O scaled to the new row maxima, then P packed for ``mma_pv``: the last register
        math before P V, after the previous P V (which read ``p``) is done."""
        c = code
        c("#pragma unroll")
        with c.block("for (int mi = 0; mi < ROW_BLOCKS; ++mi)"):
            c("#pragma unroll")
            with c.block("for (int i = 0; i < O_REGS; ++i)"):
                c("o_acc[mi][i] *= alpha[mi][(i >> 1) & 1];  // registers 4g+2h+e: row half h")
        if self.scaled_inputs:
            # e4m3 quads: register r of k32 step kk takes this thread's scores of row half
            # r % 2 in the 8-column groups 4 kk + 2 (r / 2) and the next (keys in vt's
            # order: codegen.kernels.attention_fp8.p_register).
            what, regs = "e4m3 quads", "S_REGS / 4"
            setup = ["const int h = i & 1, g = 4 * (i >> 2) + 2 * ((i >> 1) & 1);"]
            scores = [f"s_acc[mi][4 * g + {4 * (e // 2) + e % 2} + 2 * h]" for e in range(4)]
            packed = c.call("pack_e4m3x4", *scores)
        else:
            what, regs, setup = "16-bit pairs", "S_REGS / 2", []
            packed = c.call(convert.pack2(self.dtype), "s_acc[mi][2 * i]", "s_acc[mi][2 * i + 1]")
        order = " (keys in vt's order)" if self.scaled_inputs else ""
        c.comment(f"P = the scores after exp2, as the {what} of "
                  f"{self.target.mma_name}'s A fragment{order}")
        c("#pragma unroll")
        with c.block("for (int mi = 0; mi < ROW_BLOCKS; ++mi)"):
            c("#pragma unroll")
            with c.block(f"for (int i = 0; i < {regs}; ++i)"):
                for line in setup:
                    c(line)
                c(f"p[mi][i] = {packed};")

    def _write_lse(self, code: Code, lse: str) -> None:
        """The row's log-sum-exp ``lse`` (a C++ expression) to global memory, by the
        row's first thread."""
        c = code
        c("const int row = q0 + row0 + mi * 64 + warp * 16 + h * 8 + (lane >> 2);")
        head, position = ("heads0 + row % PACK", "row / PACK")
        if self.heads_outer:
            head = "heads0 + (row - q0) / (TILE_Q / PACK)"
            position = self.position("row - q0")
        with c.block("if ((lane & 3) == 0 && row < Q_ROWS)"):
            c(f"lse[((unsigned long long)batch0 * HEADS + {head}) * SEQ_Q + "
              f"{position}] = {lse};  // no key: +inf")

    def normalize(self, code: Code, at: TripAt) -> None:
        """``O / l`` before the store, and the row's fp32 log-sum-exp
        ``lse = (m c + log2 l) ln 2`` (FlashAttention's softmax_lse; +inf for a row with no
        key) written by the row's first thread."""
        c = code
        c.comment("o / l, l summed over the row's 4 threads; lse = (m c + log2 l) ln 2 (m: the raw "
                  "row max, c = SCALE_LOG2), written by the row's first thread")
        with self.target.accumulator_rows(c):
            c("float l = l_row[mi][h];")
            c("l += __shfl_xor_sync(0xffffffffu, l, 1);")
            c("l += __shfl_xor_sync(0xffffffffu, l, 2);")
            c(f"const float inv = l > 0.f ? {'v_scale0' if self.scaled_inputs else '1.f'} / l "
              ": 0.f;")
            lse = (f"l > 0.f ? (m_row[mi][h] * {self.scale} + __log2f(l)) * {LN2!r}f : "
                   f"{POS_INF}")
            if self.lse_staged:
                c(f"lse_val[mi][h] = {lse};  // staged with o; no key: +inf")
            else:
                self._write_lse(c, lse)
            c("#pragma unroll")
            with c.block("for (int g = 0; g < O_REGS / 4; ++g)"):
                c("o_acc[mi][4 * g + 2 * h] *= inv;")
                c("o_acc[mi][4 * g + 2 * h + 1] *= inv;")


__all__ = ["LN2", "NEG_INF", "POS_INF", "OnlineSoftmax"]
