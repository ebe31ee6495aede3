"""Check a batch of generated kernels in one go, for the test modules: on the GPU, every
case rendered, checked against the fp32 reference with poisoned outputs on seeded random
inputs, its result kept by schedule hash and written to ``<basetemp>/<op>_gpu_results.txt``
(NVRTC compiles in parallel); on the CPU, sources compiled by nvcc for sm_90a, in
parallel, none failing, spilling or serialising its wgmma."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from codegen import render
from codegen.nvcc import PtxasReport, compile_report
from scheduler_search.hardware.model import Device
from scheduler_search.ops import OperatorSpec
from scheduler_search.sprogram import SProgram

Case = tuple[str, OperatorSpec, SProgram]


def check_kernels(
    cases: list[Case], device: Device, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """schedule hash -> the workers' Measurement of its kernel."""
    from workers import Job, LocalGpuPool, ParallelCompiler, TimingConfig

    quick = TimingConfig(warmup_launches=1, warmup_ms=0.0, min_samples=2, min_time_ms=0.0)
    jobs = [
        Job({"op": spec.op, "params": spec.params()}, artifact=render(sprogram, spec, device),
            timing=quick, seed=3, deadline_s=30.0)
        for _, spec, sprogram in cases
    ]
    compiler = ParallelCompiler(cache_dir=tmp_path_factory.mktemp("cubins"))
    with LocalGpuPool(compiler=compiler, codegen_version="test") as pool:
        measured = pool.measure(jobs)
    op = cases[0][1].op
    log = Path(tmp_path_factory.getbasetemp()) / f"{op}_gpu_results.txt"
    with log.open("w") as f:
        for (name, _, sp), m in zip(cases, measured, strict=True):
            f.write(f"{name} {sp.hash[:12]} {m.status.value} {m.rel_error} {m.latency_us} "
                    f"{sp.choices} {m.error[:200]}\n")
    return {sp.hash: m for (_, _, sp), m in zip(cases, measured, strict=True)}


def assert_correct(result: Any, name: str, sprogram: SProgram) -> None:
    """The kernel ran and matched the reference (relative L2 error under 1e-2)."""
    assert result.status.value == "ok", (name, sprogram.choices, result.error, result.log[-500:])
    assert result.rel_error is not None and result.rel_error < 1e-2


def assert_compile_clean(sources: list[str]) -> list[PtxasReport]:
    """Compile ``sources`` with nvcc; none fails, spills, uses a stack or has ptxas
    serialise its wgmma. The reports, in order."""
    with ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as pool:
        reports = list(pool.map(compile_report, sources))
    failures = [r.log[-400:] if not r.ok else f"spills {r.spills}" for r in reports
                if not r.ok or r.spills or r.stack_bytes]
    assert not failures, failures[:3]
    serialised = [r.log for r in reports if "serialized" in r.log]
    assert not serialised, serialised[:1]
    return reports
