"""GEMM schedules whose kernels take m at run time, for the run-time size tests: the
hand-written design, its stream-K and swapped variants and a seeded sample of the
persistent space, each planned at the top of a range."""

from __future__ import annotations

import random
from dataclasses import replace

from schedule_samples import _SeededTrial

from codegen import unsupported
from scheduler_search.hardware.model import Device
from scheduler_search.ops import OperatorSpec
from scheduler_search.space import ScheduleSpace
from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED
from scheduler_search.sprogram import SProgram, plan_sprogram

#: The design and the stream-K shapes a range table picks most (one and two waves
#: shared out, narrow tiles for small m).
DESIGNS: dict[str, dict] = {
    "design": {},
    "stream_k_1": {"stream_k": 1, "tile_n": 128},
    "stream_k_2": {"stream_k": 2},
    # m along wgmma's N (swap_ab): a 16-row and a 136-row m tile, stored transposed.
    "swap_16": {"swap_ab": True, "map_store": "cuda_core", "tile_m": 16, "tile_n": 128,
                "consumer_warpgroups": 1, "stages_ab": 12, "stream_k": 1},
    "swap_136": {"swap_ab": True, "map_store": "cuda_core", "tile_m": 136, "tile_n": 64,
                 "consumer_warpgroups": 1, "stages_ab": 6},
}


def runtime_m(sprogram: SProgram) -> SProgram:
    return replace(sprogram, runtime_dims=("m",))


def design_schedules(spec: OperatorSpec, device: Device) -> dict[str, SProgram]:
    """The designs of :data:`DESIGNS` with m at run time, those the renderer lowers."""
    out = {}
    for name, choices in DESIGNS.items():
        sprogram = runtime_m(plan_sprogram(spec, device, {**GEMM_WARP_SPECIALIZED, **choices}))
        if unsupported(sprogram, device) is None:
            out[name] = sprogram
    return out


def sampled_schedules(spec: OperatorSpec, device: Device, count: int,
                      seed: int = 0) -> list[SProgram]:
    """``count`` distinct persistent schedules of the space, with m at run time."""
    space = ScheduleSpace(spec, device, fixed={"persistent": True})
    rng = random.Random(f"{seed}:{spec.workload_key()}")
    found: dict[str, SProgram] = {}
    for _ in range(20000):
        if len(found) == count:
            break
        sprogram, validity = space.build(space.suggest(_SeededTrial(rng)))
        sprogram = runtime_m(sprogram)
        if validity.ok and unsupported(sprogram, device) is None:
            found.setdefault(sprogram.hash, sprogram)
    return list(found.values())
