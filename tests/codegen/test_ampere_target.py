"""The Ampere-class target (sm_80, sm_86, sm_89) on the CPU: the ldmatrix lanes of its
mma.sync products give the instructions' fragments, its copy map is the struct the kernel
declares, and sampled kernels of every operator compile with nvcc without spills; the same
sPrograms as Hopper's, walked by the same skeleton."""

from __future__ import annotations

import os
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from schedule_samples import sample_schedules

from codegen import cuda, render
from codegen.cuda import SWIZZLES
from codegen.nvcc import compile_report, nvcc_path
from codegen.targets import ADA, AMPERE, target_for, target_of_kernel
from codegen.targets.ampere import copies, mma_sync
from scheduler_search.hardware import get_device, running_code_of
from scheduler_search.hardware.catalog import CODE_ARCHS
from scheduler_search.ops import parse_spec
from scheduler_search.sprogram import plan_sprogram

needs_nvcc = pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")


# ----- the lanes of ldmatrix against the fragments of mma.sync m16n8k16 ---------------
@dataclass(frozen=True)
class Tile:
    """A 16-bit operand tile in shared memory as the copies lay it out (TMA's layout):
    ``rows`` of M / N by ``cols`` of K, K-major (rows one span apart, boxes along K) or
    MN-major (K rows one span apart, boxes along M / N), swizzled by address."""

    major: str
    rows: int
    cols: int
    span: int

    @property
    def box_inner(self) -> int:
        return self.span // 2

    @property
    def box_bytes(self) -> int:
        outer = self.rows if self.major == "k" else self.cols
        return self.box_inner * outer * 2

    def address(self, row: int, k: int) -> int:
        """The swizzled byte address of element (row, k), the tile at address 0."""
        if self.major == "k":
            box, inside = divmod(k, self.box_inner)
            logical = box * self.box_bytes + row * self.span + inside * 2
        else:
            box, inside = divmod(row, self.box_inner)
            logical = box * self.box_bytes + k * self.span + inside * 2
        return SWIZZLES[self.span].apply(logical)

    def memory(self) -> dict[int, tuple[int, int]]:
        """Byte address -> the element stored there."""
        return {self.address(r, k): (r, k) for r in range(self.rows) for k in range(self.cols)}


def _ldmatrix(memory: dict[int, tuple[int, int]], lane_address: list[int],
              trans: bool) -> list[list[tuple[tuple[int, int], ...]]]:
    """What ``ldmatrix.x4`` (``.trans``) leaves in each lane's four registers: matrix i's
    row r is the 8 elements at lane 8 i + r's address; register i of lane t holds row t / 4,
    elements 2 (t % 4) and +1 of matrix i (of its transpose with ``.trans``)."""
    matrices = [[[memory[lane_address[8 * i + r] + 2 * c] for c in range(8)]
                 for r in range(8)] for i in range(4)]
    out = []
    for t in range(32):
        regs = []
        for m in matrices:
            if trans:
                regs.append((m[2 * (t % 4)][t // 4], m[2 * (t % 4) + 1][t // 4]))
            else:
                regs.append((m[t // 4][2 * (t % 4)], m[t // 4][2 * (t % 4) + 1]))
        out.append(regs)
    return out


def _lane_addresses(tile: Tile, base_row: str, formulas: tuple[str, str],
                    **names: int) -> list[int]:
    """Each lane's (swizzled) address by the module's C expressions, which Python reads
    alike but for its integer division."""
    row, k = formulas
    expression = mma_sync.tile_address("base", tile.major, f"{base_row} + {row}", k, "span", "box")
    out = []
    for lane in range(32):
        env = {"lane": lane, "base": 0, "span": tile.span, "box": tile.box_bytes, **names}
        logical = eval(expression.replace("/", "//"), {}, env)  # C's u32 division
        out.append(SWIZZLES[tile.span].apply(logical))
    return out


@pytest.mark.parametrize("major", ["k", "mn"])
@pytest.mark.parametrize("span", [128, 64, 32])
def test_a_lanes_give_the_mma_sync_a_fragment(major: str, span: int) -> None:
    """Register i of lane t holds A[16 w + t / 4 + 8 (i & 1)][2 (t % 4) + 8 (i >> 1) + e]
    (PTX ISA, "Matrix Fragments for mma.m16n8k16"), for each warp w of the block."""
    tile = Tile(major, 64, 64, span) if major == "k" else Tile(major, 64, 32, 128)
    if major == "mn" and span != 128:
        pytest.skip("an MN-major A is 64 rows wide: one 128-byte span")
    memory = tile.memory()
    for kk in range(tile.cols // 16):
        for warp in range(4):
            k0 = 16 * kk
            lanes = _lane_addresses(tile, "0", mma_sync.A_LANES[major], warp=warp)
            lanes = [SWIZZLES[tile.span].apply(_logical_of(tile, a) + _kstep(tile, k0))
                     for a in lanes]
            regs = _ldmatrix(memory, lanes, trans=major == "mn")
            for t in range(32):
                for i in range(4):
                    row = 16 * warp + t // 4 + 8 * (i & 1)
                    want = tuple((row, k0 + 2 * (t % 4) + 8 * (i >> 1) + e) for e in range(2))
                    assert regs[t][i] == want, (major, span, warp, t, i)


@pytest.mark.parametrize("major", ["k", "mn"])
@pytest.mark.parametrize("span", [128, 64, 32])
def test_tile_place_takes_the_logical_address_apart(major: str, span: int) -> None:
    """The box, row and byte ``swizzled_row`` is handed add up to :func:`tile_address`'s
    logical address, with the byte inside its row (the helper's precondition): for column
    groups ``row0`` (multiples of 16) and a lane's row under 16 of them, every K."""
    box = 4096
    expressions = mma_sync.tile_place("base", major, "r", "k", "span", "box", row0="row0")
    whole = mma_sync.tile_address("base", major, "row0 + r", "k", "span", "box")
    k_range = range(0, span, 2) if major == "k" else range(64)
    for row0 in range(0, 256, 16):
        for r in range(16):
            for k in k_range:
                env = {"base": 1 << 20, "row0": row0, "r": r, "k": k, "span": span, "box": box}
                at, row, byte = (eval(e.replace("/", "//"), {}, env) for e in expressions)
                assert 0 <= byte < span
                assert at + row * span + byte == eval(whole.replace("/", "//"), {}, env)


def _logical_of(tile: Tile, swizzled: int) -> int:
    return SWIZZLES[tile.span].apply(swizzled)  # the swizzle is its own inverse


def _kstep(tile: Tile, k0: int) -> int:
    """The operand's offset of K step ``k0`` inside a stage (``OperandTile.kstep_expr``)."""
    if tile.major == "k":
        return (k0 // tile.box_inner) * tile.box_bytes + (k0 % tile.box_inner) * 2
    return k0 * tile.span


@pytest.mark.parametrize("major", ["k", "mn"])
@pytest.mark.parametrize("n", [16, 64, 96])
def test_b_lanes_give_the_mma_sync_b_fragments(major: str, n: int) -> None:
    """Per 16 columns: registers 0, 1 of lane t are b0, b1 of the first 8 columns
    (B[k = 2 (t % 4) + e (+ 8)][n = t / 4]), registers 2, 3 the next 8's."""
    tile = Tile(major, n, 32, 64) if major == "k" else Tile(major, n, 32, 128)
    if major == "mn" and n % 64:
        tile = Tile(major, n, 32, 32)  # 16-column boxes
    memory = tile.memory()
    for k0 in (0, 16):
        for n0 in range(0, n, 16):
            lanes = _lane_addresses(tile, str(n0), mma_sync.B_LANES[major])
            lanes = [SWIZZLES[tile.span].apply(_logical_of(tile, a) + _kstep(tile, k0))
                     for a in lanes]
            regs = _ldmatrix(memory, lanes, trans=major == "mn")
            for t in range(32):
                for j in range(2):
                    for half in range(2):
                        want = tuple((n0 + 8 * j + t // 4, k0 + 2 * (t % 4) + 8 * half + e)
                                     for e in range(2))
                        assert regs[t][2 * j + half] == want, (major, n, n0, t, j, half)


def test_the_same_lanes_give_the_8_bit_fragments_of_m16n8k32() -> None:
    """A K-major row's 16 bytes are 16 e4m3 values: register i of lane t holds A[16 w +
    t / 4 + 8 (i & 1)][4 (t % 4) + 16 (i >> 1) + e], e < 4; B's b0, b1 of the 8 columns
    n = t / 4 hold K 4 (t % 4) + e and + 16 (PTX ISA, "Matrix Fragments for mma.m16n8k32")."""
    span, rows, cols = 128, 64, 128  # a 64 x 128 byte tile: 8-bit K in one span per row

    def address(row: int, k: int) -> int:
        return SWIZZLES[span].apply(row * span + k)

    memory = {address(r, k): (r, k) for r in range(rows) for k in range(cols)}

    def load(lanes: list[int]) -> list[list[tuple[tuple[int, int], ...]]]:
        # ldmatrix moves b16 pairs: lane t's register i is bytes 4 (t % 4) .. + 3 of row t / 4.
        return [[tuple(memory[lanes[8 * i + t // 4] + 4 * (t % 4) + e] for e in range(4))
                 for i in range(4)] for t in range(32)]

    tile = Tile("k", rows, cols, span)
    for k0 in (0, 32, 96):
        for warp in range(4):
            lanes = [SWIZZLES[span].apply(_logical_of(tile, a) + k0)
                     for a in _lane_addresses(tile, "0", mma_sync.A_LANES["k"], warp=warp)]
            regs = load(lanes)
            for t in range(32):
                for i in range(4):
                    row = 16 * warp + t // 4 + 8 * (i & 1)
                    want = tuple((row, k0 + 4 * (t % 4) + 16 * (i >> 1) + e) for e in range(4))
                    assert regs[t][i] == want, (k0, warp, t, i)
        lanes = [SWIZZLES[span].apply(_logical_of(tile, a) + k0)
                 for a in _lane_addresses(tile, "16", mma_sync.B_LANES["k"])]
        regs = load(lanes)
        for t in range(32):
            for j in range(2):
                for half in range(2):
                    want = tuple((16 + 8 * j + t // 4, k0 + 4 * (t % 4) + 16 * half + e)
                                 for e in range(4))
                    assert regs[t][2 * j + half] == want, (k0, t, j, half)


def test_a_mutated_lane_formula_is_caught() -> None:
    wrong = ("16 * warp + (lane & 7)", "(lane >> 4) * 16")
    tile = Tile("k", 64, 64, 128)
    lanes = _lane_addresses(tile, "0", wrong, warp=0)
    regs = _ldmatrix(tile.memory(), lanes, trans=False)
    assert regs[0][1] != ((8, 0), (8, 1))


# ----- the copy map --------------------------------------------------------------------
def test_the_copy_map_is_128_bytes_of_the_fields_the_host_packs() -> None:
    from codegen.artifact import TensorMapArg
    from workers.tensor_maps import encode_copy_map

    arg = TensorMapArg(name="q_map", tensor="q", dtype="bfloat16", global_dims=(128, 32, 1000, 2),
                       global_strides_bytes=(256, 8192, 8192000), box_dims=(64, 1, 128, 1),
                       swizzle="128B")
    raw = encode_copy_map(arg, 0x7F0000001000).tobytes()
    assert len(raw) == copies.COPY_MAP_BYTES
    values = struct.unpack_from("<Q4Q5I5I4I", raw)
    assert values[0] == 0x7F0000001000
    assert values[1:5] == (256, 8192, 8192000, 0)
    assert values[5:10] == (128, 32, 1000, 2, 1)
    assert values[10:15] == (64, 1, 128, 1, 1)
    assert values[15:] == (1, 128, 4, 3)  # 2-byte elements, 128 B swizzle, rank 4, 8 chunks
    with pytest.raises(ValueError, match="16-byte"):
        encode_copy_map(arg, 0x7F0000001008)
    odd = TensorMapArg(name="v_map", tensor="v", dtype="float32", global_dims=(48, 64),
                       global_strides_bytes=(192,), box_dims=(48, 64), swizzle="none")
    with pytest.raises(ValueError, match="power of two"):
        encode_copy_map(odd, 0x7F0000001000)


@needs_nvcc
def test_the_kernel_s_copy_map_has_the_host_s_offsets() -> None:
    """nvcc places each field where the host packs it (static_asserts in a probe)."""
    offsets, at = [], 0
    for name, ctype, count in copies.COPY_MAP_FIELDS:
        size = 8 if ctype == "u64" else 4
        at += -at % size
        offsets.append(f"static_assert(offsetof(TensorMap, {name}) == {at}, \"{name}\");")
        at += size * count
    source = ("#include <cstddef>\n" + cuda.prelude(["TensorMap"], AMPERE.snippet_variants)
              + "static_assert(sizeof(TensorMap) == 128 && alignof(TensorMap) == 64, \"size\");\n"
              + "\n".join(offsets) + '\nextern "C" __global__ void probe(const __grid_constant__ '
              "TensorMap map, u32* out) { out[0] = map.dims[0]; }\n")
    report = compile_report(source, target=AMPERE)
    assert report.ok, report.log


# ----- whole kernels -------------------------------------------------------------------
_MAMBA2 = {"nheads": 80, "headdim": 64, "dstate": 128, "ngroups": 1, "chunk_size": 256,
           "dtype": "float16"}
CASES = (
    ("gemm", {"m": 4000, "n": 6000, "k": 2000, "dtype": "bfloat16", "b_layout": "kn"}),
    ("gemm", {"m": 16, "n": 4096, "k": 4096, "dtype": "float16", "b_layout": "nk"}),
    ("attention", {"batch": 1, "heads": 32, "kv_heads": 8, "seq_q": 2048, "seq_kv": 2048,
                   "head_dim": 128, "causal": True, "dtype": "float16"}),
    ("attention", {"batch": 2, "heads": 16, "kv_heads": 16, "seq_q": 1000, "seq_kv": 1000,
                   "head_dim": 64, "causal": False, "dtype": "bfloat16", "layout": "bhsd"}),
    ("mamba2_chunk_scan", {**_MAMBA2, "batch": 2, "seqlen": 2048}),
    ("mamba2_chunk_state", {**_MAMBA2, "batch": 2, "seqlen": 2048}),
)
#: Only where mma.sync multiplies 8-bit floats (sm_89).
FP8_CASES = (
    ("gemm", {"m": 1000, "n": 2048, "k": 1024, "dtype": "float8_e4m3", "b_layout": "nk"}),
)


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("device_name", ["a100", "l40s"])
def test_sampled_kernels_of_every_operator_compile_for_their_architecture(
        device_name: str) -> None:
    device = get_device(device_name)
    target = target_for(device.arch)
    kernels = []
    cases = CASES + (FP8_CASES if device.capabilities.fp8_mma else ())
    for op, params in cases:
        spec = parse_spec(op, params)
        for sprogram in sample_schedules(spec, device, 2, seed=5):
            artifact = render(sprogram, spec, device)
            assert artifact.compile_options == target.compile_options
            kernels.append((op, sprogram.choices, artifact.source))
    assert {op for op, _, _ in kernels} == {op for op, _ in CASES}
    with ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as pool:
        reports = list(pool.map(lambda k: compile_report(k[2], target=target), kernels))
    bad = [(op, choices, r.log[-300:] if not r.ok else f"spills {r.spills}")
           for (op, choices, _), r in zip(kernels, reports, strict=True)
           if not r.ok or r.spills or r.stack_bytes]
    assert not bad, bad
    for _, _, source in kernels:
        assert "wgmma.mma_async" not in source and "cp.async.bulk" not in source
        assert "mma.sync.aligned.m16n8k" in source and "cp.async.cg.shared.global" in source


def test_a_gpu_running_older_code_is_planned_with_that_architecture_s_limits() -> None:
    h200 = get_device("h200")
    device = running_code_of(h200, "sm_80")
    assert (device.arch, device.sm_count, device.compute_capability) == ("sm_80", 132, (9, 0))
    assert device.smem_per_block_bytes == CODE_ARCHS["sm_80"].smem_per_block_bytes
    assert not device.capabilities.tma and device.identity() != h200.identity()
    spec = parse_spec("gemm", {"m": 512, "n": 512, "k": 512, "dtype": "float16"})
    sprogram = next(iter(sample_schedules(spec, device, 1, seed=1)))
    artifact = render(sprogram, spec, device)
    # Compiled for the GPU it runs on, labelled with the architecture of its code.
    assert artifact.compile_options == ("-std=c++17", "-arch=sm_90")
    assert artifact.extra["code_arch"] == "sm_80"
    assert target_of_kernel(artifact.compile_options, artifact.extra) is AMPERE
    with pytest.raises(ValueError, match="cannot run"):
        running_code_of(get_device("a100"), "sm_89")
    assert target_for("sm_89") is ADA
    # The benches' spelling of the same device.
    assert get_device("h200@sm_80") == device
    with pytest.raises(KeyError, match="sm_70"):
        get_device("h200@sm_70")


def test_a_product_s_first_step_writes_its_accumulators_where_registers_are_spare() -> None:
    """With registers to spare, the step that does not accumulate is mma.sync with C = 0
    behind a branch (nvcc made a zeroing pass a select per accumulator on every trip of
    the loop), every other step adds; without, the accumulators are zeroed before it."""
    spec = parse_spec("gemm", {"m": 1024, "n": 1024, "k": 1024, "dtype": "float16",
                               "b_layout": "nk"})
    device = get_device("a100")
    sprogram = next(iter(sample_schedules(spec, device, 1, seed=3)))
    source = render(sprogram, spec, device).source
    loop = source.split("Main loop")[-1].split("// store")[0]
    body = loop.split("if constexpr (SPARE_REGISTERS)")[1]  # spare, then the other form
    written, zeroed = body.index("mma_m16n8k16_f16_fresh("), body.index("] = 0.0f;")
    assert written < zeroed and "_fresh(" not in body[zeroed:]
    assert "mma_m16n8k16_f16(" in body[zeroed:] and "] = 0.0f;" not in loop[:loop.index(body)]
    mma = mma_sync.instruction("float16", fresh=True).code
    assert '"=f"(c[0])' in mma and "{%8, %8, %8, %8}" in mma and '"f"(0.0f)' in mma


#: Two sm_80 attention structures of 384 threads (168 registers a thread) the suite bench
#: measured on 2026-12-05; with the ldmatrix lanes' offsets kept in registers nvcc 13.0
#: spilled 48 and 152 bytes in them (the second spills 40 without, as before them).
_TIGHT_ATTENTION = (
    ({"batch": 1, "heads": 32, "kv_heads": 8, "seq_q": 8192, "seq_kv": 8192, "head_dim": 128,
      "causal": False, "layout": "bshd", "dtype": "float16"},
     {"consumer_split": "cooperative", "consumer_warpgroups": 2, "map_softmax_exp2": "sfu",
      "order": "serial", "persistent": True, "raster_major": "q", "raster_swizzle": 1,
      "stages_k": 2, "stages_v": 3, "tile_g": 4, "tile_kv": 96, "tile_q": 128,
      "warp_specialized": True, "wg_schedule": "free"}),
    ({"batch": 8, "heads": 32, "kv_heads": 8, "seq_q": 2048, "seq_kv": 2048, "head_dim": 128,
      "causal": False, "layout": "bshd", "dtype": "float16"},
     {"consumer_warpgroups": 3, "map_softmax_exp2": "sfu", "order": "serial",
      "persistent": True, "raster_major": "q", "raster_swizzle": 1, "stages_k": 2,
      "stages_v": 1, "tile_g": 4, "tile_kv": 96, "tile_q": 192, "warp_specialized": False,
      "wg_schedule": "free"}),
)


@needs_nvcc
def test_ldmatrix_addresses_keep_lane_offsets_only_where_registers_allow() -> None:
    """A 256-thread sm_80 GEMM of one 128-row consumer warpgroup has registers to spare
    for each lane's ldmatrix offsets; 384-thread attention kernels swizzle each address
    where they load it (the first then compiles without spills)."""
    device = get_device("h200@sm_80")
    gemm = parse_spec("gemm", {"m": 4096, "n": 4096, "k": 4096, "dtype": "float16",
                               "b_layout": "nk"})
    choices = {"consumer_warpgroups": 1, "order": "serial", "persistent": False,
               "raster_major": "m", "raster_swizzle": 1, "stages_ab": 2, "tile_k": 128,
               "tile_m": 128, "tile_n": 128, "warp_specialized": True}
    source = render(plan_sprogram(gemm, device, choices), gemm, device).source
    assert "constexpr bool SPARE_REGISTERS = true;" in source
    sources = []
    for params, choices in _TIGHT_ATTENTION:
        spec = parse_spec("attention", params)
        sources.append(render(plan_sprogram(spec, device, choices), spec, device).source)
        assert "constexpr bool SPARE_REGISTERS = false;" in sources[-1]
    report = compile_report(sources[0], target=AMPERE)
    assert report.ok and report.spills == 0, report.spills
