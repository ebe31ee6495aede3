"""One shared-memory plan: the bytes the validator admits a schedule with are the bytes its
kernel asks for, region by region, over the 540 snapshot schedules of every operator."""

from __future__ import annotations

from dataclasses import replace

from text_snapshot import DEVICE_NAME, _spec_and_runtime, load

from codegen.render import lowering
from scheduler_search.hardware import get_device
from scheduler_search.sprogram import check_valid, plan_sprogram
from scheduler_search.sprogram.validate import smem_plan


def test_the_validator_and_the_kernel_lay_out_the_same_bytes() -> None:
    device = get_device(DEVICE_NAME)
    differ = []
    for entry in load():
        spec, _ = _spec_and_runtime(entry["op"], entry["params"])
        sprogram = plan_sprogram(spec, device, entry["choices"])
        if entry["runtime_dims"]:
            sprogram = replace(sprogram, runtime_dims=tuple(entry["runtime_dims"]))
        graph = spec.graph(sprogram.tile)
        admitted = smem_plan(sprogram, graph, graph.plan)
        kernel = lowering(sprogram, device).layout.smem
        if (sorted(admitted.sizes.values()) != sorted(kernel.sizes.values())
                or admitted.dynamic_bytes != kernel.dynamic_bytes
                or check_valid(sprogram, spec, device).smem_bytes != kernel.dynamic_bytes):
            differ.append((entry["op"], entry["choices"]))
    assert not differ, f"{len(differ)} schedules differ, e.g. {differ[:2]}"


def test_packed_heads_keep_a_vector_tile_a_head() -> None:
    device = get_device(DEVICE_NAME)
    params = {"batch": 2, "seqlen": 1024, "nheads": 16, "headdim": 64, "dstate": 128,
              "ngroups": 1, "chunk_size": 256, "dtype": "float16"}
    spec, _ = _spec_and_runtime("mamba2_chunk_state", params)
    sizes = {}
    for heads in (1, 2):
        entry = next(e for e in load() if e["op"] == "mamba2_chunk_state"
                     and e["choices"].get("tile_g") == 2
                     and e["choices"].get("map_vector_loads") == "tma")
        choices = {**entry["choices"], "tile_g": heads}
        sprogram = plan_sprogram(spec, device, choices)
        graph = spec.graph(sprogram.tile)
        sizes[heads] = smem_plan(sprogram, graph, graph.plan).sizes["load_dt"]
    assert sizes[2] == 2 * sizes[1]
