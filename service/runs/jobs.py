"""The worker jobs of a run: a candidate's generated kernel, a vendor peer's call.

A GPU run times its candidates with the search preset's quick policy and its finalists
and peers with the final one (``scheduler_search.search.presets``); here the policies
become the worker's :class:`~workers.TimingConfig` and deadline. Every job carries the
workload's tensor contract (the operator spec's ``tensors()``), which the worker builds,
checks and launches by.
"""

from __future__ import annotations

from typing import Any

from scheduler_search.ops import OperatorSpec, workload_tensors
from scheduler_search.search import FINAL_TIMING, TimingPolicy
from scheduler_search.sprogram import SProgram
from workers import Job, TimingConfig


def timing_config(policy: TimingPolicy) -> TimingConfig:
    """The worker's timing config of a search timing policy."""
    return TimingConfig(warmup_launches=policy.warmup_launches, warmup_ms=policy.warmup_ms,
                        min_samples=policy.min_samples, min_time_ms=policy.min_time_ms)


def kernel_job(
    sprogram: SProgram,
    spec: OperatorSpec,
    model: Any,
    workload: dict[str, Any],
    seed: int,
    policy: TimingPolicy,
) -> Job:
    """The GPU job of a candidate: its generated kernel on the run's workload."""
    from codegen import render

    return Job(workload=workload, artifact=render(sprogram, spec, model), seed=seed,
               timing=timing_config(policy), deadline_s=policy.deadline_s,
               tensors=tuple(spec.tensors()))


def baseline_job(name: str, workload: dict[str, Any], seed: int) -> Job:
    """The GPU job of a vendor peer (``workers.baselines``) on the run's workload, timed as
    a finalist is."""
    tensors = tuple(workload_tensors(workload["op"], workload["params"]))
    return Job(workload, baseline=name, timing=timing_config(FINAL_TIMING), seed=seed,
               deadline_s=FINAL_TIMING.deadline_s, tensors=tensors)
