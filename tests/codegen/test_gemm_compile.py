"""96 schedules sampled across the GEMM space of every suite shape (both B layouts, fp16
and bf16) compile with nvcc for sm_90a with no spills and no stack frame.

The sample is deterministic (seeded, define-by-run like the search); nothing is cached
between runs. Compiles run in parallel, one nvcc per CPU core.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest
from schedule_samples import sample_schedules

from codegen import render
from codegen.nvcc import compile_report, nvcc_path
from scheduler_search.hardware import get_device
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.ops.suites import GEMM_SHAPES

pytestmark = pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")

DEVICE = get_device("h200")
PER_CASE = 3  # 8 shapes x 2 layouts x 3 = 48 schedules (half a minute of nvcc)
SEED = 2026
#: fp16 and bf16 kernels differ only in their conversions: each (shape, layout) takes
#: one, the two alternating over the shapes, so both meet every layout.
DTYPES = ("float16", "bfloat16")


def _sample() -> list[tuple[str, str, str]]:
    """(case, choices, source) for every sampled schedule."""
    out = []
    for index, (m, n, k) in enumerate(GEMM_SHAPES):
        for turn, layout in enumerate(("kn", "nk")):
            dtype = DTYPES[(index + turn) % 2]
            spec = GemmSpec(m=m, n=n, k=k, dtype=dtype, b_layout=layout)
            for sprogram in sample_schedules(spec, DEVICE, PER_CASE, seed=SEED):
                source = render(sprogram, spec, DEVICE).source
                out.append((f"{m}x{n}x{k}-{dtype}-{layout}", str(sprogram.choices), source))
    return out


@pytest.mark.slow
def test_sampled_gemm_schedules_compile_without_spills() -> None:
    sample = _sample()
    assert len(sample) >= 45
    assert len({src for _, _, src in sample}) == len(sample)
    workers = max(2, os.cpu_count() or 2)
    with ThreadPoolExecutor(workers) as pool:
        reports = list(pool.map(lambda item: compile_report(item[2]), sample))
    failures = [
        (case, choices, r.log[-400:] if not r.ok else f"spills {r.spills}, stack {r.stack_bytes}")
        for (case, choices, _), r in zip(sample, reports, strict=True)
        if not r.ok or r.spills or r.stack_bytes
    ]
    assert not failures, f"{len(failures)} of {len(sample)} failed: {failures[:5]}"
    assert all(0 < r.registers <= 255 for r in reports)
    print(
        f"{len(sample)} schedules compiled; registers "
        f"{min(r.registers for r in reports)}-{max(r.registers for r in reports)}, 0 spills"
    )
