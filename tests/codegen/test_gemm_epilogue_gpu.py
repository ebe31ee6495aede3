"""GEMMs with a fused epilogue on a real GPU: every activation, bias, residual and scale,
on suite shapes and on shapes that are multiples of no tile (rows and columns past the
output, an odd n with B stored n x k), both stores, fp16 and bf16; checked by the workers
against the fp32 reference (the GEMM, then the epilogue in fp32) on seeded random inputs.

Run on an H200 with ``pytest tests/codegen -m gpu``; skipped where CuPy sees no GPU.
"""

from __future__ import annotations

from typing import Any

import pytest
from gpu import cuda_device_visible
from kernel_checks import assert_correct, check_kernels
from schedule_samples import sample_schedules

from codegen import feasibility
from scheduler_search.hardware import get_device
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.space import ScheduleSpace
from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED
from scheduler_search.sprogram import SProgram

pytestmark = pytest.mark.gpu

DEVICE = get_device("h200")
EPILOGUES: tuple[dict[str, Any], ...] = (
    {"bias": True, "act": "gelu"},
    {"bias": True, "residual": True},
    {"act": "gelu_tanh", "scale": 0.5},
    {"bias": True, "act": "relu", "residual": True},
    {"act": "silu", "residual": True, "scale": -2.0},
)
#: (m, n, k, b_layout, dtype): a suite shape, shapes past every tile, an odd n (nk).
SHAPES = (
    (4096, 4096, 4096, "kn", "float16"),
    (4000, 6000, 2000, "nk", "bfloat16"),
    (777, 1000, 520, "kn", "float16"),
    (513, 1001, 776, "nk", "float16"),
)


def _cases() -> list[tuple[str, GemmSpec, SProgram]]:
    cases = []
    for index, epilogue in enumerate(EPILOGUES):
        for m, n, k, layout, dtype in SHAPES:
            spec = GemmSpec(m=m, n=n, k=k, dtype=dtype, b_layout=layout, epilogue=epilogue)
            programs = list(sample_schedules(spec, DEVICE, 2, seed=index))
            space = ScheduleSpace(spec, DEVICE, feasibility("gemm", DEVICE))
            for store in ("tma", "cuda_core"):
                design, validity = space.build({**GEMM_WARP_SPECIALIZED, "map_store": store})
                if validity.ok:
                    programs.append(design)
            name = f"{m}x{n}x{k}-{dtype}-{layout}-{spec.epilogue.describe()}"
            cases += [(name, spec, p) for p in {p.hash: p for p in programs}.values()]
    return cases


CASES = _cases() if cuda_device_visible() else []


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return check_kernels(CASES, DEVICE, tmp_path_factory)


@pytest.mark.parametrize(
    ("name", "spec", "sprogram"), CASES, ids=[f"{n}-{p.hash[:8]}" for n, _, p in CASES]
)
def test_fused_epilogue_gemm_is_correct(
    results: dict[str, Any], name: str, spec: GemmSpec, sprogram: SProgram
) -> None:
    assert_correct(results[sprogram.hash], name, sprogram)
