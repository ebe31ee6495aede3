"""Chunk scan's register math on the MMA's accumulator layout: the decays, the masked
products and the skip term (the text of ``ChunkScanHooks``' math sTasks and of the skip
term's reads at the tile's start).

Each function writes loops over this thread's rows (``ROW_BLOCKS`` x 2 halves, row
``TILE_ROW`` of the tile) or values of the target's accumulator layout, in the kernel
text's names
(``acc``, ``e``, ``dal``, ``x_skip``, ``d_h``, ``dt_v``, ``dA_v``). What depends on the
schedule (the sEU's exp2, the ring stage, the dtype) comes in as arguments, so the hooks
keep the tiles, loads and products and only pick these.
"""

from __future__ import annotations

from dataclasses import dataclass

from codegen.cuda import activations, convert
from codegen.pipeline import Code
from codegen.targets import Target

#: This thread's row of accumulator block ``mi``, half ``h``, within the tile.
TILE_ROW = "row0 + mi * 64 + warp * 16 + h * 8 + (lane >> 2)"


def each_row(target: Target, code: Code, body: list[str]) -> None:
    """``body`` for each of this thread's rows (row block ``mi``, half ``h``): row
    ``TILE_ROW`` of the tile, its accumulator values ``acc[mi][4 g + 2 h]`` and ``+1``."""
    with target.accumulator_rows(code):
        for line in body:
            code(line)


def each_value(target: Target, code: Code, body: list[str],
               before: list[str] | None = None) -> None:
    """``body`` for each (row block mi, half h, 8-column group g, element q) of ``e``:
    ``e[mi][4 g + 2 h + q]`` is row TILE_ROW, column ``8 g + 2 (lane % 4) + q``, from
    k16 step ``g / 2``, fragment column ``j = 2 (g % 2) + q``; ``before`` once per row."""
    target.each_accumulator_value(code, "E_REGS", "q", body, before)


def decay_out(target: Target, code: Code, dal_in_smem: bool,
              packed_sequences: bool = False) -> None:
    """``acc *= exp(dA[l])`` of each column's head: the state term's decay. With
    ``dal_in_smem`` (TMA filled the tile buffer) dA[l] is first read from shared memory;
    otherwise the threads loaded it into ``dal`` already. With ``packed_sequences`` the
    term is zero on rows of another sequence than the one the previous chunk ended in
    (sequence 0 before the first chunk)."""
    c = code
    if dal_in_smem:
        c.comment("dA[l] of this thread's rows (each packed head's in turn), from the tile "
                  "buffer TMA filled")
        each_row(target, c, [
            "#pragma unroll",
            "for (int j = 0; j < PACK; ++j) dal[j][mi][h] = " + c.call(
                "ld_shared_f32", f"smem + SMEM_DAL + (j * TILE_L + {TILE_ROW}) * 4")
            + " * LOG2E;"])
    c.comment("the state term decays by exp(dA[l]) of each head")
    same = []
    if packed_sequences:
        c("const int* seq_chunk = seq_idx + (unsigned long long)batch0 * SEQLEN + chunks0 * "
          "CHUNK;")
        c("const int seq_before = chunks0 > 0 ? __ldg(seq_chunk - 1) : 0;  // the state's "
          "sequence")
        same = [f"const bool same = __ldg(seq_chunk + l0 + {TILE_ROW}) == seq_before;"]
    decay = "exp2f(dal[(8 * g) / HEAD_COLS][mi][h])"
    each_row(target, c, [
        *same,
        "#pragma unroll",
        "for (int g = 0; g < ACC_REGS / 4; ++g) {",
        f"  const float decay = {'same ? ' + decay + ' : 0.f' if same else decay};",
        "  acc[mi][4 * g + 2 * h] *= decay; acc[mi][4 * g + 2 * h + 1] *= decay;",
        "}",
    ])


def decay(target: Target, code: Code, exp2: str, head: int) -> None:
    """``e[head] = exp(dA[l] - dA[s])`` of packed head ``head`` (its ``dA_v`` in registers),
    as one ``exp2`` of an fma: dA is scaled by log2(e) on the fly."""
    each_value(target, code, [
        f"e[{head}][mi][4 * g + 2 * h + q] = {exp2}(fmaf(-dA_v[{head}][g / 2]"
        f"[2 * (g % 2) + q], LOG2E, dal[{head}][mi][h]));"])


@dataclass(frozen=True)
class GramSource:
    """Where ``scale_cb`` reads ``cb``: the ring ``stage`` TMA filled (fp32 in shared
    memory), or (no stage) this thread's ``cb`` registers that ``mma_cb`` wrote, masked
    between sequences itself with ``packed_sequences``."""

    stage: str = ""
    packed_sequences: bool = False


def masked_products(target: Target, code: Code, pm: str, trip: str, source: GramSource,
                    dtype: str) -> None:
    """``pm = cb e dt`` (0 above the diagonal, tested only on a trip that crosses it),
    packed to the 16-bit pairs of the MMA's A fragment. cb is read in that layout a pair
    at a time, once for every packed head (it is the same for all heads of the group):
    from shared memory, or from registers, with the pairs of another sequence than the
    row's zero when the sequences are packed."""
    c = code
    pack = convert.pack2(dtype)
    if source.stage:
        c.use("swizzle_128b")
        c(f"const u32 cb_tile = smem + SMEM_CB + {source.stage} * CB_STAGE_BYTES;")
        read = "const float2 cbv = " + c.call(
            "ld_shared_f32x2",
            "cb_tile + (col / 32) * CB_BOX_BYTES + swizzle_128b(row * 128 + (col % 32) * 4)"
        ) + ";"
    else:
        read = "const float2 cbv = make_float2(cb[mi][4 * g + 2 * h], cb[mi][4 * g + 2 * h + 1]);"
    c(f"const int s0 = {trip} * TILE_S;")
    c("const bool diagonal = s0 + TILE_S - 1 > l0 + row0;  // some s > l in this trip")
    before = [f"const int row = {TILE_ROW};  // in the tile"]
    keep = ["const bool keep0 = !diagonal || s0 + col <= l0 + row;",
            "const bool keep1 = !diagonal || s0 + col + 1 <= l0 + row;"]
    if source.packed_sequences:
        c("const int* seq_chunk = seq_idx + (unsigned long long)batch0 * SEQLEN + chunks0 * "
          "CHUNK;")
        before.append("const int seq_row = __ldg(seq_chunk + l0 + row);")
        keep = ["const int2 seq_s = __ldg(reinterpret_cast<const int2*>(seq_chunk + s0 + col));",
                "const bool keep0 = (!diagonal || s0 + col <= l0 + row) && seq_s.x == seq_row;",
                "const bool keep1 = (!diagonal || s0 + col + 1 <= l0 + row) && "
                "seq_s.y == seq_row;"]
    each_value(
        target, c,
        before=before,
        body=[
            "if (q) continue;  // a pair at a time",
            "const int col = 8 * g + 2 * (lane & 3);",
            read,
            "const int j = 2 * (g % 2);",
            *keep,
            "#pragma unroll",
            "for (int head = 0; head < PACK; ++head) {  // cb is the same for every head",
            "  const float v0 = keep0 ? cbv.x * e[head][mi][4 * g + 2 * h] * "
            "dt_v[head][g / 2][j] : 0.f;",
            "  const float v1 = keep1 ? cbv.y * e[head][mi][4 * g + 2 * h + 1] * "
            "dt_v[head][g / 2][j + 1] : 0.f;",
            f"  {pm}[head][mi][2 * g + h] = {c.call(pack, 'v0', 'v1')};",
            "}",
        ],
    )


def read_skip_inputs(target: Target, code: Code, d_per_channel: bool = False) -> None:
    """``d_h`` (D of the tile's heads, unless D is per channel) and ``x_skip`` (x[l, p]
    pairs of this thread's outputs) from global memory, issued at the tile's start so that
    they land while the loop runs (read in the epilogue, they would cost a memory latency
    per tile)."""
    c = code
    if not d_per_channel:
        c("#pragma unroll")
        c("for (int j = 0; j < PACK; ++j) d_h[j] = __ldg(D + heads0 + j);")
    each_row(target, c, [
        f"const int row = l0 + {TILE_ROW};",
        "const unsigned short* x_row = x + (((unsigned long long)batch0 * SEQLEN + chunks0 "
        "* CHUNK + row) * NHEADS + heads0) * HEADDIM + p0;",
        "#pragma unroll",
        "for (int g = 0; g < ACC_REGS / 4; ++g) x_skip[mi][h][g] = "
        "__ldg(reinterpret_cast<const u32*>(x_row + 8 * g + 2 * (lane & 3)));",
    ])


def add_skip(target: Target, code: Code, dtype: str, d_per_channel: bool = False) -> None:
    """``acc += D x[l, p]`` from the registers :func:`read_skip_inputs` filled: D of the
    column's head, or with ``d_per_channel`` D[h, p] of the column (this thread's columns
    read once, as float2 pairs, for all its rows)."""
    c = code
    unpack = convert.unpack2(dtype)
    if d_per_channel:
        c("float2 d_c[ACC_REGS / 4];  // D[h, p] of this thread's column pairs")
        c("#pragma unroll")
        c("for (int g = 0; g < ACC_REGS / 4; ++g) d_c[g] = __ldg(reinterpret_cast<const "
          "float2*>(D + heads0 * HEADDIM + p0 + 8 * g + 2 * (lane & 3)));")
        weights = ("d_c[g].x", "d_c[g].y")
    else:
        weights = ("d", "d")
    each_row(target, c, [
        "#pragma unroll",
        "for (int g = 0; g < ACC_REGS / 4; ++g) {",
        f"  const float2 v = {c.call(unpack, 'x_skip[mi][h][g]')};",
        *([] if d_per_channel else
          ["  const float d = d_h[(8 * g) / HEAD_COLS];  // D of the column's head"]),
        f"  acc[mi][4 * g + 2 * h] += {weights[0]} * v.x;",
        f"  acc[mi][4 * g + 2 * h + 1] += {weights[1]} * v.y;",
        "}",
    ])


def gate(code: Code, dtype: str) -> None:
    """``v0, v1 *= silu(z)`` of the pair the store is writing (row ``row``, columns
    ``col``, ``col + 1`` of the tile's rows in ``x``'s layout): z read once, by the store,
    so it needs no registers across the loop."""
    c, silu = code, activations.activation("silu")
    assert silu is not None  # a known activation's snippet
    unpack = convert.unpack2(dtype)
    c("const unsigned short* z_row = z + (((unsigned long long)batch0 * SEQLEN + chunks0 * "
      "CHUNK + row) * NHEADS + heads0) * HEADDIM;")
    c(f"const float2 zv = {c.call(unpack, '__ldg(reinterpret_cast<const u32*>(z_row + col))')};")
    c(f"v0 *= {c.call(silu, 'zv.x')}; v1 *= {c.call(silu, 'zv.y')};")
