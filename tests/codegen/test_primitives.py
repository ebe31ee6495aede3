"""Every device primitive compiles alone with nvcc for sm_90a, called from a tiny kernel
(an uncalled inline function would never reach ptxas); and the Python facts behind them."""

from __future__ import annotations

import pytest

from codegen import cuda
from codegen.cuda import SWIZZLES
from codegen.nvcc import compile_report, nvcc_path
from codegen.targets import ampere, hopper
from codegen.targets.hopper import SmemMatrix, wgmma

needs_nvcc = pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")

#: One statement per registered primitive, run in a kernel with these locals:
#: ``u32 a`` (a shared address), ``float f``, ``u32 r[4]``, ``float acc[8]``, ``map``.
CALLS = {
    "types": "u32 t = a; (void)t;",
    "smem_u32": "r[0] = smem_u32(buf);",
    "pack_f16x2": "r[0] = pack_f16x2(f, f);",
    "pack_bf16x2": "r[0] = pack_bf16x2(f, f);",
    "to_f16": "out[0] = to_f16(f);",
    "to_bf16": "out[0] = to_bf16(f);",
    "fence_proxy_async_smem": "fence_proxy_async_smem();",
    "named_barrier_sync": "named_barrier_sync(1, 128);",
    "named_barrier_arrive": "named_barrier_arrive(2, 256);",
    "named_barrier_or": "r[0] = named_barrier_or(1, 128, f > 0.0f) ? 1u : 0u;",
    "stmatrix_x4": "stmatrix_x4(a, r[0], r[1], r[2], r[3]);",
    "stmatrix_x4_trans": "stmatrix_x4_trans(a, r[0], r[1], r[2], r[3]);",
    "stmatrix_x2_trans": "stmatrix_x2_trans(a, r[0], r[1]);",
    "ldmatrix_x4": "ldmatrix_x4(a, r[0], r[1], r[2], r[3]);",
    "ldmatrix_x4_trans": "ldmatrix_x4_trans(a, r[0], r[1], r[2], r[3]);",
    "ld_shared_f32": "acc[0] = ld_shared_f32(a);",
    "ld_shared_f32x2": "{ const float2 v = ld_shared_f32x2(a); acc[0] = v.x + v.y; }",
    "st_shared_f32": "st_shared_f32(a, acc[0]);",
    "st_shared_f32x2": "st_shared_f32x2(a, acc[0], acc[1]);",
    "ld_shared_u32x4": "{ const uint4 v = ld_shared_u32x4(a); r[0] = v.x ^ v.w; }",
    "st_shared_u32": "st_shared_u32(a, r[0]);",
    "red_add_f32x2": "red_add_f32x2(reinterpret_cast<float*>(out), acc[0], acc[1]);",
    "red_add_f32x4": "red_add_f32x4(reinterpret_cast<float*>(out), acc[0], acc[1], acc[2], "
                     "acc[3]);",
    "ld_acquire_u32": "r[0] = ld_acquire_u32(reinterpret_cast<const unsigned int*>(out));",
    "pack_e4m3x4": "r[0] = pack_e4m3x4(f, f, f, f);",
    "byte_perm": "r[0] = byte_perm(r[0], a, 0x5410u);",
    "unpack_f16x2": "{ const float2 v = unpack_f16x2(a); acc[0] = v.x + v.y; }",
    "unpack_bf16x2": "{ const float2 v = unpack_bf16x2(a); acc[0] = v.x + v.y; }",
    "mbarrier_init": "mbarrier_init(a, 1);",
    "mbarrier_init_fence": "mbarrier_init_fence();",
    "mbarrier_arrive": "mbarrier_arrive(a);",
    "mbarrier_arrive_warp": "mbarrier_arrive_warp(a, threadIdx.x % 32);",
    "mbarrier_arrive_expect_tx": "mbarrier_arrive_expect_tx(a, 1024);",
    "mbarrier_wait": "mbarrier_wait(a, 0);",
    "setmaxnreg_inc": "setmaxnreg_inc<232>();",
    "setmaxnreg_dec": "setmaxnreg_dec<40>();",
    "swizzle_32b": "r[0] = swizzle_32b(a);",
    "swizzle_64b": "r[0] = swizzle_64b(a);",
    "swizzle_128b": "r[0] = swizzle_128b(a);",
    "TensorMap": "r[0] = (u32)map.opaque[0];",
    "tma_prefetch_descriptor": "tma_prefetch_descriptor(&map);",
    "tma_load_2d": "tma_load_2d(a, &map, 0, 64, a + 8);",
    "tma_load_2d_multicast": "tma_load_2d_multicast(a, &map, 0, 64, a + 8, (unsigned short)3);",
    "cluster_ctarank": "r[0] = cluster_ctarank();",
    "cluster_sync": "cluster_sync();",
    "mbarrier_arrive_cluster": "mbarrier_arrive_cluster(a, 1u);",
    "mbarrier_arrive_cluster_warp": "mbarrier_arrive_cluster_warp(a, threadIdx.x % 32, 2);",
    "mbarrier_arrive_cluster_release": "mbarrier_arrive_cluster_release(a, 1u);",
    "mbarrier_wait_cluster": "mbarrier_wait_cluster(a, 0u);",
    "mapa_generic": "acc[0] = *mapa_generic(reinterpret_cast<const float*>(buf), 1u);",
    "tma_load_3d": "tma_load_3d(a, &map, 0, 1, 64, a + 8);",
    "tma_load_3d_multicast": "tma_load_3d_multicast(a, &map, 0, 1, 64, a + 8, (unsigned short)3);",
    "tma_load_4d": "tma_load_4d(a, &map, 0, 1, 64, 2, a + 8);",
    "act_relu": "acc[2] = act_relu(f);",
    "act_gelu": "acc[3] = act_gelu(f);",
    "act_gelu_tanh": "acc[4] = act_gelu_tanh(f);",
    "act_silu": "acc[5] = act_silu(f);",
    "tanh_approx": "acc[6] = tanh_approx(f);",
    "exp2_approx": "acc[0] = exp2_approx(f);",
    "rcp_approx": "acc[1] = rcp_approx(f);",
    "tma_store_2d": "tma_store_2d(&map, 0, 64, a);",
    "tma_store_3d": "tma_store_3d(&map, 0, 1, 64, a);",
    "tma_store_4d": "tma_store_4d(&map, 0, 1, 64, 2, a);",
    "tma_store_commit": "tma_store_commit();",
    "tma_store_wait_reads": "tma_store_wait_reads<1>();",
    "tma_store_wait": "tma_store_wait<0>();",
    "wgmma_fence": "wgmma_fence();",
    "wgmma_commit": "wgmma_commit();",
    "wgmma_wait": "wgmma_wait<1>();",
    "wgmma_fence_operands": "wgmma_fence_operands(acc);",
    "wgmma_descriptor": "r[0] = (u32)wgmma_descriptor(a, 0x4000004000010000ull);",
    "cp_async_16": "cp_async_16(a, (u64)out, 16);",
    "cp_async_arrive_noinc": "cp_async_arrive_noinc(a);",
    "ldmatrix_x2": "ldmatrix_x2(a, r[0], r[1]);",
    "ldmatrix_x2_trans": "ldmatrix_x2_trans(a, r[0], r[1]);",
    "swizzled": "r[0] = swizzled(a, 128);",
    "swizzled_row": "r[0] = swizzled_row(a + 32, 3, 16, 128);",
    "cp_async_16_unless": "cp_async_16_unless(a, (u64)out, f > 0.0f);",
}


def _kernel(uses: list, body: str) -> str:
    head = cuda.prelude(["types", "smem_u32", "TensorMap", *uses])
    return (
        head
        + '\nextern "C" __global__ void __launch_bounds__(128, 1) probe('
        + "const __grid_constant__ TensorMap map, float f, unsigned short* out, u32* sink) {\n"
        + "  __shared__ __align__(1024) unsigned char buf[4096];\n"
        + "  u32 a = smem_u32(buf) + threadIdx.x * 16; u32 r[4] = {a, a, a, a};\n"
        + "  float acc[8] = {f, f, f, f, f, f, f, f};\n"
        + f"  {body}\n"
        + "  sink[threadIdx.x] = r[0] + r[1] + r[2] + r[3] + (u32)acc[0] + (u32)acc[7];\n}\n"
    )


def test_every_registered_primitive_has_a_probe() -> None:
    assert set(CALLS) == set(cuda.registered())


@needs_nvcc
@pytest.mark.parametrize("name", sorted(CALLS))
def test_primitive_compiles_alone(name: str) -> None:
    report = compile_report(_kernel([name], CALLS[name]))
    assert report.ok, report.log
    assert report.spills == 0


@needs_nvcc
@pytest.mark.parametrize(
    ("n", "dtype", "major", "a_from"),
    [(256, "float16", "mn", "smem"), (96, "bfloat16", "k", "smem"), (8, "float16", "k", "smem"),
     (128, "float16", "mn", "registers"), (64, "bfloat16", "k", "registers"),
     (64, "bfloat16", "k", "smem_mn"), (128, "float8_e4m3", "k", "registers")],
)
def test_generated_wgmma_variant_compiles(n: int, dtype: str, major: str, a_from: str) -> None:
    """``smem_mn``: A MN-major in shared memory (a swapped GEMM's weight stored k x n)."""
    if a_from.startswith("smem"):
        a_major = "mn" if a_from == "smem_mn" else "k"
        mma, a = wgmma.mma(n, dtype, major, a_major), "(u64)a"
    else:
        mma, a = wgmma.mma_rs(n, dtype, major), "r[0], r[1], r[2], r[3]"
    body = (
        f"float d[{n // 2}]; for (int i = 0; i < {n // 2}; ++i) d[i] = f;\n"
        f"  wgmma_fence(); {mma.name}(d, {a}, (u64)a, 1); wgmma_commit(); wgmma_wait<0>();\n"
        f"  wgmma_fence_operands(d); acc[0] = d[0] + d[{n // 2 - 1}];"
    )
    report = compile_report(
        _kernel([mma, "wgmma_fence", "wgmma_commit", "wgmma_wait", "wgmma_fence_operands"], body)
    )
    assert report.ok, report.log
    assert f"m64n{n}k{wgmma.k_step(dtype)}" in mma.code
    assert ("{%" in mma.code) == (a_from == "registers")  # A as a register vector


def test_wgmma_variants_are_generated_not_pasted() -> None:
    a = wgmma.mma(64, "float16", "k")
    b = wgmma.mma(64, "bfloat16", "mn")
    assert "f32.f16.f16" in a.code and "p, 1, 1, 0, 0;" in a.code
    assert "f32.bf16.bf16" in b.code and "p, 1, 1, 0, 1;" in b.code
    assert a.code.count('"+f"') == 32
    with pytest.raises(ValueError):
        wgmma.mma(100, "float16", "k")


def test_prelude_holds_only_what_is_used_with_dependencies_once() -> None:
    text = cuda.prelude(["mbarrier_wait", "mbarrier_wait", "tma_load_2d"])
    assert text.count("typedef unsigned int u32;") == 1
    assert "mbarrier_wait" in text and "tma_load_2d" in text and "struct alignas(64)" in text
    assert "stmatrix" not in text and "wgmma" not in text
    assert cuda.prelude(["tma_load_2d", "mbarrier_wait"]) == text  # stable order


def test_swizzle_matches_cute_swizzle_3_4_3() -> None:
    s = SWIZZLES[128]
    # Row r, 16-byte chunk c -> chunk c ^ (r % 8) (CuTe Swizzle<3,4,3> on byte offsets).
    for row in range(16):
        for chunk in range(8):
            assert s.apply(row * 128 + chunk * 16) == row * 128 + ((chunk ^ (row % 8)) * 16)
    assert SWIZZLES[64].apply(2 * 64 + 0) == 2 * 64 + 16  # rows 2-3 flip chunk bit 0
    assert (s.tma, s.align_bytes) == ("128B", 1024)
    assert [wgmma.SWIZZLE_MODES[s.span_bytes] for s in (s, SWIZZLES[64], SWIZZLES[32])] == [
        1, 2, 3]


def test_descriptor_layout_bits() -> None:
    k_major = SmemMatrix("k", SWIZZLES[128], lbo_bytes=16, sbo_bytes=1024)
    assert k_major.layout_bits == (1 << 16) | (64 << 32) | (1 << 62)
    mn_major = SmemMatrix("mn", SWIZZLES[128], lbo_bytes=8192, sbo_bytes=1024)
    assert mn_major.layout_bits >> 16 & 0x3FFF == 512
    with pytest.raises(ValueError):
        SmemMatrix("k", SWIZZLES[128], lbo_bytes=8, sbo_bytes=1024)


def test_preludes_order_families_by_rank_not_by_import() -> None:
    """Snippets come in their family's rank (each family module's ``PRELUDE_RANK``), then
    in the order the family gives them: a family that moves to another package, or is
    imported first, leaves every kernel's text as it was."""
    families = [cuda.activations, cuda.base, hopper.cluster, cuda.convert, cuda.fences,
                cuda.reductions, hopper.ldstmatrix, cuda.mbarrier, hopper.regs, cuda.sfu,
                cuda.swizzle, cuda.tma, hopper.wgmma, ampere.copies, ampere.mma_sync]
    ranks = [cuda.prelude_rank(name) for name in cuda.registered()]
    assert ranks == sorted(ranks)
    assert set(ranks) == {module.PRELUDE_RANK for module in families}
    assert len({module.PRELUDE_RANK for module in families}) == len(families)
    text = cuda.prelude(["wgmma_fence", "mbarrier_wait", "act_relu"])  # in any order
    assert text.index("act_relu(") < text.index("mbarrier_wait(") < text.index("wgmma_fence(")
