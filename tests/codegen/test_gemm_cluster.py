"""GEMM in thread-block clusters: the sProgram's cluster is what the kernel does.

Two blocks of neighbouring tiles share one operand tile per loop trip; each fetches half
of it by TMA multicast for both. Held here without a GPU: the kernel's rings count the
releases of both blocks, the shared operand's tensor map fetches a slice, the grid is
whole clusters, what cannot be lowered is refused with its reason, and every variant
compiles for sm_90a without spills (the GPU checks them in test_gemm_gpu.py).
"""

from __future__ import annotations

import pytest
from kernel_checks import assert_compile_clean

from codegen import lowering, render, unsupported
from codegen.artifact import TensorMapArg
from codegen.nvcc import nvcc_path
from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_spec
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED
from scheduler_search.sprogram import check_valid, plan_sprogram

DEVICE = get_device("h200")
DESIGN = {**GEMM_WARP_SPECIALIZED, "cluster_size": 2}


def _spec(layout: str = "kn", m: int = 4096, n: int = 4096, k: int = 4096) -> GemmSpec:
    return GemmSpec(m=m, n=n, k=k, dtype="float16", b_layout=layout)


@pytest.mark.parametrize(("axis", "shared", "own"), [("m", "b", "a"), ("n", "a", "b")])
@pytest.mark.parametrize("layout", ["kn", "nk"])
def test_the_shared_operand_is_fetched_in_slices_for_both_blocks(
    axis: str, shared: str, own: str, layout: str
) -> None:
    spec = _spec(layout)
    sp = plan_sprogram(spec, DEVICE, {**DESIGN, "cluster_axis": axis})
    assert sp.cluster is not None and sp.cluster.multicast == (f"load_{shared}",)
    art = render(sp, spec, DEVICE)
    maps = {t.tensor: t for t in art.args if isinstance(t, TensorMapArg)}
    alone = render(plan_sprogram(spec, DEVICE, GEMM_WARP_SPECIALIZED), spec, DEVICE)
    plain = {t.tensor: t for t in alone.args if isinstance(t, TensorMapArg)}
    # The shared operand's box is half its tile's along the outer dimension; the other's
    # is whole.
    assert maps[shared].box_dims == (plain[shared].box_dims[0], plain[shared].box_dims[1] // 2)
    assert maps[own].box_dims == plain[own].box_dims
    record = lowering(sp, DEVICE).record
    consumer_warps = 4 * sp.roles.consumer_warpgroups
    assert record.rings["ab"].empty_arrivals == 2 * consumer_warps  # both blocks release
    assert art.cluster == (2, 1, 1) and alone.cluster == (1, 1, 1)
    assert art.grid[0] % 2 == 0 and art.grid[0] <= DEVICE.sm_count


@pytest.mark.parametrize("persistent", [True, False])
def test_the_grid_holds_every_tile_in_whole_clusters(persistent: bool) -> None:
    spec = _spec("nk", m=4000, n=6000, k=2000)
    lone = render(plan_sprogram(spec, DEVICE, {**GEMM_WARP_SPECIALIZED,
                                               "persistent": persistent}), spec, DEVICE)
    paired = render(plan_sprogram(spec, DEVICE, {**DESIGN, "persistent": persistent}),
                    spec, DEVICE)
    if persistent:
        assert paired.grid == lone.grid == (132, 1, 1)  # 66 clusters, one wave
    else:
        assert paired.grid == lone.grid == (32 * 24, 1, 1)  # one block per tile


def test_what_cannot_be_lowered_is_refused_with_its_reason() -> None:
    spec = _spec()
    no_producer = plan_sprogram(spec, DEVICE, {**DESIGN, "warp_specialized": False})
    assert unsupported(no_producer, DEVICE) == "thread-block clusters need a producer warp"
    thin = plan_sprogram(spec, DEVICE, {**DESIGN, "cluster_axis": "n", "tile_m": 64,
                                        "consumer_warpgroups": 1})
    assert unsupported(thin, DEVICE) is None  # 64 rows: two 32-row slices
    low = plan_sprogram(spec, DEVICE, {**DESIGN, "producer_regs": 24})
    assert "the producer's loads need 40 registers" in unsupported(low, DEVICE)
    state = parse_spec("mamba2_chunk_state", {
        "batch": 1, "seqlen": 1024, "nheads": 8, "headdim": 64, "dstate": 128, "ngroups": 1,
        "chunk_size": 256, "dtype": "float16"})
    sp = plan_sprogram(state, DEVICE, {"tile_p": 64, "tile_n": 128, "tile_l": 64,
                                       "warp_specialized": True, "cluster_size": 2,
                                       "cluster_axis": "p"})
    problem = unsupported(sp, DEVICE)
    assert problem is not None and "lowers no cluster" in problem


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_clustered_variants_compile_without_spills() -> None:
    variants = []
    for layout in ("kn", "nk"):
        for axis in ("m", "n"):
            for extra in ({}, {"persistent": False}, {"map_store": "cuda_core"},
                          {"consumer_split": "pingpong", "wg_schedule": "alternate",
                           "tile_m": 64, "stages_ab": 3}):
                spec = _spec(layout, m=4000, n=6000, k=2000)
                sp = plan_sprogram(spec, DEVICE, {**DESIGN, "cluster_axis": axis, **extra})
                if not check_valid(sp, spec, DEVICE).ok:  # 63 m tiles of 64 rows: no pairs
                    continue
                assert unsupported(sp, DEVICE) is None, (layout, axis, extra)
                variants.append(render(sp, spec, DEVICE).source)
    assert len(variants) == 14
    assert_compile_clean(variants)


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_a_cluster_that_cannot_cover_the_tiles_does_not_compile() -> None:
    """63 m tiles of 64 rows cannot pair: the space rejects the schedule, and a kernel
    rendered from it anyway (as a test once did, and ran it past the tile grid into an
    illegal instruction on the GPU) stops at nvcc with the reason."""
    from codegen.nvcc import compile_report

    spec = _spec("nk", m=4000, n=6000, k=2000)
    pair = {**DESIGN, "cluster_axis": "m", "tile_m": 64, "tile_n": 128,
            "consumer_warpgroups": 1}
    source = render(plan_sprogram(spec, DEVICE, pair), spec, DEVICE).source
    assert "static_assert(TILES_M % CLUSTER == 0" in source
    report = compile_report(source)
    assert not report.ok and "clusters cover whole tiles along m" in report.log


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_the_decode_seeds_past_128_tokens_compile_without_spills() -> None:
    """The wave-fitted tile's pairs of m tiles sharing each weight tile (four 64-row ones
    at 256 x 8192 x 3584, two 128-row ones at 256 x 14336 x 4096), its peer of the other
    height and the peer's pair (128 x 128 in clusters of two, as cuBLAS runs it), bf16
    and e4m3."""
    from codegen import feasibility
    from scheduler_search.search.warm_start import fit_to_space
    from scheduler_search.space import ScheduleSpace
    from scheduler_search.space.designs import decode_designs

    sources = []
    for (m, n, k), dtype in [((256, 8192, 3584), "bfloat16"), ((256, 8192, 3584), "float8_e4m3"),
                             ((256, 14336, 4096), "bfloat16")]:
        spec = parse_spec("gemm", {"m": m, "n": n, "k": k, "dtype": dtype, "b_layout": "nk"})
        space = ScheduleSpace(spec, DEVICE, feasibility("gemm", DEVICE))
        for design in decode_designs(spec)[:4]:
            sprogram, validity = space.build(fit_to_space(space, design))
            assert validity.ok, (m, n, dtype, design, validity.rejections)
            sources.append(render(sprogram, spec, DEVICE).source)
    assert sum("__cluster_dims__" in s for s in sources) == 5  # 2 pairs each for 8192, 1 for 14336
    assert_compile_clean(sources)
