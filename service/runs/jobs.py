"""The worker jobs of a run: a candidate's generated kernel, a vendor peer's call.

A GPU run times its candidates with the search preset's quick policy and its finalists
and peers with the final one (``scheduler_search.search.presets``), all by the timing
method of its workload (``timing_method``: a CUDA graph's replay for short or memory-bound
workloads, per-launch events for the rest); here the policies become the worker's
:class:`~workers.TimingConfig` and deadline. Every job carries the
workload's tensor contract (the operator spec's ``tensors()``), which the worker builds,
checks and launches by.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from scheduler_search.ops import OperatorSpec, workload_tensors
from scheduler_search.search import FINAL_TIMING, SEARCH_TIMING, TimingPolicy
from scheduler_search.search.presets import EVENTS, timing_method
from scheduler_search.sprogram import SProgram
from workers import Job, TimingConfig


def timing_config(policy: TimingPolicy) -> TimingConfig:
    """The worker's timing config of a search timing policy."""
    return TimingConfig(warmup_launches=policy.warmup_launches, warmup_ms=policy.warmup_ms,
                        min_samples=policy.min_samples, min_time_ms=policy.min_time_ms,
                        method=policy.method)


def kernel_job(
    sprogram: SProgram,
    spec: OperatorSpec,
    model: Any,
    workload: dict[str, Any],
    seed: int,
    policy: TimingPolicy,
) -> Job:
    """The GPU job of a candidate: its generated kernel on the run's workload, timed by
    ``policy`` with the workload's timing method."""
    from codegen import render

    policy = policy.for_workload(spec, model)
    return Job(workload=workload, artifact=render(sprogram, spec, model), seed=seed,
               timing=timing_config(policy), deadline_s=policy.deadline_s,
               tensors=tuple(spec.tensors()))


def baseline_job(name: str, workload: dict[str, Any], seed: int, method: str = EVENTS) -> Job:
    """The GPU job of a vendor peer (``workers.baselines``) on the run's workload, timed as
    a finalist is, by ``method`` (the workload's: ``timing_method``)."""
    tensors = tuple(workload_tensors(workload["op"], workload["params"]))
    policy = replace(FINAL_TIMING, method=method)
    return Job(workload, baseline=name, timing=timing_config(policy), seed=seed,
               deadline_s=policy.deadline_s, tensors=tensors)


#: The warm-up GEMM: small, so warming costs a fraction of a second once started.
WARM_UP_GEMM = {"m": 512, "n": 512, "k": 512, "b_layout": "kn"}
WARM_UP_DTYPES = ("float16", "bfloat16")


def warm_up_jobs(model: Any, seed: int = 0) -> list[Job]:
    """What a GPU executor measures when it is warmed (``Executor.warm``): per 16-bit
    input type, the hand-written GEMM design's kernel and the run baseline, on a small
    GEMM. A worker's first measurement of a type compiles CuPy's own kernels (inputs,
    poison, the reference check), creates the cuBLAS handle and, for bf16, imports
    PyTorch: seconds that the first request of a warm serve would otherwise wait for."""
    from scheduler_search.ops.gemm import GemmSpec
    from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED
    from scheduler_search.sprogram import plan_sprogram

    jobs = []
    for dtype in WARM_UP_DTYPES:
        spec = GemmSpec(**WARM_UP_GEMM, dtype=dtype)
        workload = {"op": "gemm", "params": spec.params()}
        sprogram = plan_sprogram(spec, model, GEMM_WARP_SPECIALIZED)
        jobs += [kernel_job(sprogram, spec, model, workload, seed, SEARCH_TIMING),
                 baseline_job(spec.run_baseline(), workload, seed,
                              timing_method(spec, model))]
    return jobs
