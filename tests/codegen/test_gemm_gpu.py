"""Generated GEMM kernels on a real GPU: correct on every suite shape and on odd shapes,
both B layouts, fp16 and bf16, with fused epilogues (every activation, bias, residual
and scale; rows and columns past the output, an odd n; both stores), of 8-bit floats
(e4m3 and e5m2, per-tensor scales, bf16 or fp16 out), with stream-K, and the decode
designs (swapped token tiles, 16- and 8-bit inputs) (checked by the
workers against the fp32 reference, with poisoned outputs, on seeded random inputs).

Run on an H200 with ``pytest tests/codegen -m gpu``; skipped where CuPy sees no GPU.
Every kernel of the module is compiled and checked in one batch (NVRTC in parallel);
each test then reads its own result.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from gpu import cuda_device_visible
from kernel_checks import assert_correct, check_kernels
from schedule_samples import sample_schedules

from codegen import feasibility
from scheduler_search.hardware import get_device
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.ops.suites import GEMM_SHAPES
from scheduler_search.search.warm_start import fit_to_space
from scheduler_search.space import ScheduleSpace
from scheduler_search.space.designs import (
    GEMM_WARP_SPECIALIZED,
    decode_designs,
    with_transposed_tma_store,
)
from scheduler_search.sprogram import SProgram, plan_sprogram

pytestmark = pytest.mark.gpu

DEVICE = get_device("h200")
SAMPLES_PER_SUITE_CASE = 2
SAMPLES_PER_ODD_CASE = 3
#: Shapes that are multiples of no tile (k and n keep TMA's 16-byte rows; n odd is only
#: possible with B stored n x k, where the output is written by direct stores).
ODD_SHAPES: tuple[tuple[int, int, int, tuple[str, ...]], ...] = (
    (777, 1000, 520, ("kn", "nk")),
    (1531, 2072, 1000, ("kn", "nk")),
    (65, 4104, 264, ("kn", "nk")),
    (2049, 328, 3080, ("kn", "nk")),
    (513, 1001, 776, ("nk",)),
    (100, 37, 48, ("nk",)),
)
#: The classic Hopper design, with a grouped raster.
REFERENCE_DESIGN = {**GEMM_WARP_SPECIALIZED, "raster_major": "m", "raster_swizzle": 8}
EPILOGUES: tuple[dict[str, Any], ...] = (
    {"bias": True, "act": "gelu"},
    {"bias": True, "residual": True},
    {"act": "gelu_tanh", "scale": 0.5},
    {"bias": True, "act": "relu", "residual": True},
    {"act": "silu", "residual": True, "scale": -2.0},
)
#: (m, n, k, b_layout, dtype) of the epilogue cases: a suite shape, shapes past every
#: tile, an odd n (B n x k).
EPILOGUE_SHAPES = (
    (4096, 4096, 4096, "kn", "float16"),
    (4000, 6000, 2000, "nk", "bfloat16"),
    (777, 1000, 520, "kn", "float16"),
    (513, 1001, 776, "nk", "float16"),
)


def _cases() -> list[tuple[str, GemmSpec, SProgram]]:
    cases = []
    for m, n, k in GEMM_SHAPES:
        for layout in ("kn", "nk"):
            for dtype in ("float16", "bfloat16"):
                spec = GemmSpec(m=m, n=n, k=k, dtype=dtype, b_layout=layout)
                programs = list(sample_schedules(spec, DEVICE, SAMPLES_PER_SUITE_CASE, seed=7))
                if k // 64 >= 4:
                    programs.append(plan_sprogram(spec, DEVICE, REFERENCE_DESIGN))
                cases += [(f"{m}x{n}x{k}-{dtype}-{layout}", spec, p) for p in programs]
    for m, n, k, layouts in ODD_SHAPES:
        for layout in layouts:
            for dtype in ("float16", "bfloat16"):
                spec = GemmSpec(m=m, n=n, k=k, dtype=dtype, b_layout=layout)
                programs = sample_schedules(spec, DEVICE, SAMPLES_PER_ODD_CASE, seed=11)
                cases += [(f"odd-{m}x{n}x{k}-{dtype}-{layout}", spec, p) for p in programs]
    return (cases + _epilogue_cases() + _fp8_cases() + _cluster_cases() + _fitted_cases()
            + _stream_k_cases() + _decode_cases())


#: (m, n, k) of the decode cases: a few tokens against weights stored n x k, one with an n
#: of 20 tiles of 64 rows (the stream-K twins split its k), one with m past a token tile,
#: one past 128 tokens (the wave-fitted 64 x 256 tile's 128 x 128 peer and its pair of
#: 128-row m tiles in a cluster, the last m tile part empty).
DECODE_SHAPES = ((1, 4096, 4096), (7, 1280, 8192), (16, 6144, 4096), (100, 4104, 272),
                 (200, 8192, 512))


def _decode_cases() -> list[tuple[str, GemmSpec, SProgram]]:
    """Every decode design a search measures first (swapped token tiles, their stream-K
    twins, the narrow unswapped tiles), 16-bit and 8-bit inputs: the swapped FP8 kernels
    dequantise on their transposed stores; 16-bit weights stored k x n too (the swapped
    kernels read them as wgmma's MN-major A); and the swapped designs' twins that stage
    the transposed output for a TMA store."""
    cases = []
    for (m, n, k), dtype, layout in itertools.product(
            DECODE_SHAPES, ("bfloat16", "float16", "float8_e4m3"), ("nk", "kn")):
        if layout == "kn" and dtype == "float8_e4m3":
            continue  # 8-bit B is K-major only
        spec = GemmSpec(m=m, n=n, k=k, dtype=dtype, b_layout=layout)
        space = ScheduleSpace(spec, DEVICE, feasibility("gemm", DEVICE))
        programs = {}
        designs = decode_designs(spec)
        designs += [with_transposed_tma_store(d) for d in designs if d.get("swap_ab")]
        for design in designs:
            sprogram, validity = space.build(fit_to_space(space, design))
            if validity.ok:
                programs[sprogram.hash] = sprogram
        cases += [(f"decode-{m}x{n}x{k}-{dtype}-{layout}", spec, p)
                  for p in programs.values()]
    return cases


#: (m, n, k, epilogue) of the fitted-tile cases: N tiles of 240 (the space's fitted tile for
#: n = 6000; 16-column store sub-tiles; B n x k only, B k x n keeps to 64-column boxes) and
#: K tails (k = 2000 and 1000: the last trip issues only the k-steps inside K), both B
#: layouts.
FITTED_SHAPES: tuple[tuple[int, int, int, dict[str, Any]], ...] = (
    (4000, 6000, 2000, {}),
    (1000, 1200, 1000, {"bias": True, "act": "gelu", "residual": True}),
)
#: The designs each fitted shape is tried in.
FITTED_VARIANTS: tuple[dict[str, Any], ...] = (
    {"tile_m": 192, "tile_n": 240, "consumer_warpgroups": 3, "stages_ab": 3,
     "warp_specialized": False, "order": "serial"},
    {"tile_m": 128, "tile_n": 240, "stages_ab": 4, "persistent": False},
    {"tile_m": 128, "tile_n": 240, "map_store": "cuda_core", "tile_k": 128, "stages_ab": 2},
    {"tile_m": 128, "tile_n": 240, "cluster_size": 2, "cluster_axis": "m"},
    {"tile_k": 128, "stages_ab": 2},
    {"tile_n": 224, "stages_ab": 3},
    {"tile_n": 160, "tile_k": 32, "stages_ab": 5, "map_store": "cuda_core"},
)


def _fitted_cases() -> list[tuple[str, GemmSpec, SProgram]]:
    cases = []
    for m, n, k, epilogue in FITTED_SHAPES:
        for dtype, layout in itertools.product(("float16", "bfloat16"), ("kn", "nk")):
            spec = GemmSpec(m=m, n=n, k=k, dtype=dtype, b_layout=layout, epilogue=epilogue)
            space = ScheduleSpace(spec, DEVICE, feasibility("gemm", DEVICE))
            for variant in FITTED_VARIANTS:
                sp, validity = space.build({**GEMM_WARP_SPECIALIZED, **variant})
                if validity.ok:  # every variant on the plain shape; some with the epilogue
                    cases.append((f"fitted-{m}x{n}x{k}-{dtype}-{layout}-"
                                  f"{spec.epilogue.describe()}", spec, sp))
    return cases


#: (m, n, k) of the cluster cases: a square suite shape, one past every tile, a single row
#: of tiles (only n can pair), an odd shape whose tiles pair along m only.
CLUSTER_SHAPES = ((4096, 4096, 4096), (4000, 6000, 2000), (128, 8192, 8192), (1531, 2072, 1000))
#: The variants each clustered design is tried in, besides the design itself.
CLUSTER_VARIANTS: tuple[dict[str, Any], ...] = (
    {},
    {"persistent": False},
    {"map_store": "cuda_core", "tile_k": 32, "stages_ab": 6},
    {"consumer_split": "pingpong", "wg_schedule": "alternate", "tile_m": 64, "stages_ab": 3},
)


def _cluster_cases() -> list[tuple[str, GemmSpec, SProgram]]:
    """Pairs of blocks sharing B (along m) or A (along n) by multicast, in each variant
    the space can build, both layouts and both 16-bit types, and with an epilogue."""
    cases = []
    for m, n, k in CLUSTER_SHAPES:
        for layout in ("kn", "nk"):
            for dtype in ("float16", "bfloat16"):
                spec = GemmSpec(m=m, n=n, k=k, dtype=dtype, b_layout=layout,
                                epilogue={"bias": True, "act": "gelu"} if m == 1531 else {})
                space = ScheduleSpace(spec, DEVICE, feasibility("gemm", DEVICE))
                for axis in ("m", "n"):
                    for variant in CLUSTER_VARIANTS:
                        sp, validity = space.build({**GEMM_WARP_SPECIALIZED, "cluster_size": 2,
                                                    "cluster_axis": axis, **variant})
                        if validity.ok:
                            cases.append((f"cluster-{axis}-{m}x{n}x{k}-{dtype}-{layout}",
                                          spec, sp))
    return cases


#: (m, n, k, epilogue) of the stream-K cases: a suite shape (116 tiles of the last wave
#: shared out), one past every tile with a K tail, fewer tiles than SMs (every tile split
#: among several blocks), an odd shape with a fused epilogue.
STREAM_K_SHAPES: tuple[tuple[int, int, int, dict[str, Any]], ...] = (
    (4096, 4096, 4096, {}),
    (4000, 6000, 2000, {}),
    (128, 8192, 8192, {}),
    (1531, 2072, 1000, {"bias": True, "act": "gelu", "residual": True}),
)
#: The variants each stream-K share is tried in (over the persistent design).
STREAM_K_VARIANTS: tuple[dict[str, Any], ...] = (
    {},
    {"tile_n": 128, "stages_ab": 5},
    {"map_store": "cuda_core", "order": "serial"},
    {"tile_m": 64, "consumer_warpgroups": 1, "tile_n": 192, "tile_k": 32, "stages_ab": 6},
)


def _stream_k_cases() -> list[tuple[str, GemmSpec, SProgram]]:
    """One and two waves of stream-K in each variant the space can build, both layouts
    and both 16-bit types."""
    cases = []
    for m, n, k, epilogue in STREAM_K_SHAPES:
        for dtype, layout in itertools.product(("float16", "bfloat16"), ("kn", "nk")):
            spec = GemmSpec(m=m, n=n, k=k, dtype=dtype, b_layout=layout, epilogue=epilogue)
            space = ScheduleSpace(spec, DEVICE, feasibility("gemm", DEVICE))
            for waves, variant in itertools.product((1, 2), STREAM_K_VARIANTS):
                sp, validity = space.build({**GEMM_WARP_SPECIALIZED, "persistent": True,
                                            "stream_k": waves, **variant})
                if validity.ok:
                    cases.append((f"stream-k{waves}-{m}x{n}x{k}-{dtype}-{layout}", spec, sp))
    return cases


#: (m, n, k, dtype, out_dtype, epilogue) of the 8-bit cases (B n x k; k a multiple of 16).
FP8_CASES: tuple[tuple[int, int, int, str, str | None, dict[str, Any]], ...] = (
    (4096, 4096, 4096, "float8_e4m3", None, {}),
    (4000, 6000, 2000, "float8_e5m2", "float16", {}),
    (777, 1000, 528, "float8_e4m3", None, {"bias": True, "act": "gelu"}),
    (8192, 1024, 1024, "float8_e4m3", "bfloat16", {"residual": True}),
)


def _fp8_cases() -> list[tuple[str, GemmSpec, SProgram]]:
    cases = []
    for m, n, k, dtype, out, epilogue in FP8_CASES:
        spec = GemmSpec(m=m, n=n, k=k, dtype=dtype, b_layout="nk", out_dtype=out,
                        epilogue=epilogue)
        programs = list(sample_schedules(spec, DEVICE, 3, seed=5))
        design, validity = ScheduleSpace(spec, DEVICE, feasibility("gemm", DEVICE)).build(
            GEMM_WARP_SPECIALIZED)
        if validity.ok:
            programs.append(design)
        name = f"fp8-{m}x{n}x{k}-{dtype}-{spec.c_dtype}-{spec.epilogue.describe()}"
        cases += [(name, spec, p) for p in {p.hash: p for p in programs}.values()]
    return cases


def _epilogue_cases() -> list[tuple[str, GemmSpec, SProgram]]:
    """Each epilogue on each shape: two sampled schedules and the design with each store."""
    cases = []
    for index, epilogue in enumerate(EPILOGUES):
        for m, n, k, layout, dtype in EPILOGUE_SHAPES:
            spec = GemmSpec(m=m, n=n, k=k, dtype=dtype, b_layout=layout, epilogue=epilogue)
            programs = list(sample_schedules(spec, DEVICE, 2, seed=index))
            space = ScheduleSpace(spec, DEVICE, feasibility("gemm", DEVICE))
            for store in ("tma", "cuda_core"):
                design, validity = space.build({**GEMM_WARP_SPECIALIZED, "map_store": store})
                if validity.ok:
                    programs.append(design)
            name = f"epilogue-{m}x{n}x{k}-{dtype}-{layout}-{spec.epilogue.describe()}"
            cases += [(name, spec, p) for p in {p.hash: p for p in programs}.values()]
    return cases


#: Built only where the kernels can run (building them takes a while on a CPU).
CASES = _cases() if cuda_device_visible() else []


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return check_kernels(CASES, DEVICE, tmp_path_factory)


@pytest.mark.parametrize(
    ("name", "spec", "sprogram"), CASES, ids=[f"{n}-{p.hash[:8]}" for n, _, p in CASES]
)
def test_generated_gemm_is_correct(
    results: dict[str, Any], name: str, spec: GemmSpec, sprogram: SProgram
) -> None:
    result = results[sprogram.hash]
    assert_correct(result, name, sprogram)
    assert result.spill_bytes == 0
