"""GEMM kernels that take m at run time, on the GPU: each compiled once, then checked by
the workers against the fp32 reference (poisoned outputs, seeded random inputs) at sizes
that cut a tile every way: one row, 17, 255 (a tile's tail), 16383 (one short of the
range's top), with and without stream-K (one and two waves shared), a fused epilogue's
residual read at tail rows.

Run on an H200 with ``pytest tests/codegen/test_runtime_sizes_gpu.py -m gpu``.
"""

from __future__ import annotations

import pytest
from runtime_samples import design_schedules

from codegen import render
from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_spec

pytestmark = pytest.mark.gpu

DEVICE = get_device("h200")
SIZES = (1, 17, 255, 16383)
TOP = 16384


def _cases() -> list[tuple[str, dict, object]]:
    """(name, exact params, bound artifact) for every kernel and size."""
    cases = []
    for dtype, layout, epilogue in (("float16", "nk", {}), ("bfloat16", "kn", {}),
                                    ("float16", "nk", {"bias": True, "residual": True})):
        params = {"n": 1024, "k": 512, "dtype": dtype, "b_layout": layout,
                  **({"epilogue": epilogue} if epilogue else {})}
        spec = parse_spec("gemm", {"m": TOP, **params})
        schedules = design_schedules(spec, DEVICE)
        if epilogue or dtype == "bfloat16":  # the design and one stream-K variant
            schedules = dict(list(schedules.items())[:1 + (not epilogue)])
        for name, sprogram in schedules.items():
            artifact = render(sprogram, spec, DEVICE)
            for m in SIZES:
                label = f"{dtype}-{layout}-{'fused-' if epilogue else ''}{name}-m{m}"
                cases.append((label, {"m": m, **params}, artifact.at_sizes({"m": m})))
    return cases


def test_runtime_m_kernels_are_correct_at_every_size(tmp_path_factory) -> None:
    from workers import Job, LocalGpuPool, ParallelCompiler, TimingConfig

    cases = _cases()
    quick = TimingConfig(warmup_launches=1, warmup_ms=0.0, min_samples=2, min_time_ms=0.0)
    jobs = [Job({"op": "gemm", "params": params}, artifact=artifact, timing=quick, seed=3,
                deadline_s=30.0) for _, params, artifact in cases]
    compiler = ParallelCompiler(cache_dir=tmp_path_factory.mktemp("cubins"))
    with LocalGpuPool(compiler=compiler, codegen_version="test") as pool:
        measured = pool.measure(jobs)
    assert len({artifact.source for _, _, artifact in cases}) * len(SIZES) == len(cases)
    failures = [(name, result.status.value, result.rel_error, result.error[:200])
                for (name, _, _), result in zip(cases, measured, strict=True)
                if result.status.value != "ok" or not result.rel_error < 1e-2]
    assert not failures, failures[:5]
