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


def test_pingpong_consumers_keep_a_copy_of_each_tile_buffer_each() -> None:
    """Pingpong attention: each consumer warpgroup loops over a query tile of its own, so
    q's buffer and its two barriers are laid out once per owner, by the validator as by
    the kernel, with the TMA-staged output and lse slots of each owner."""
    device = get_device(DEVICE_NAME)
    params = {"batch": 2, "heads": 16, "kv_heads": 4, "seq_q": 1024, "seq_kv": 1024,
              "head_dim": 128, "causal": True, "dtype": "bfloat16"}
    spec, _ = _spec_and_runtime("attention", params)
    choices = {"tile_q": 64, "tile_kv": 128, "warp_specialized": True,
               "consumer_warpgroups": 2, "wg_schedule": "alternate", "producer_regs": 24,
               "stages_k": 2, "stages_v": 2, "order": "serial", "map_softmax_exp2": "sfu",
               "map_store": "tma", "persistent": True}
    sprogram = plan_sprogram(spec, device, {**choices, "consumer_split": "pingpong"})
    graph = spec.graph(sprogram.tile)
    admitted = smem_plan(sprogram, graph, graph.plan)
    kernel = lowering(sprogram, device).layout.smem
    assert sorted(admitted.sizes.values()) == sorted(kernel.sizes.values())
    assert admitted.dynamic_bytes == kernel.dynamic_bytes
    sizes = kernel.sizes
    assert sizes["Q"] == 2 * 64 * 128 * 2  # two 64-row q tiles
    assert sizes["LOAD_Q_FULL"] == sizes["LOAD_Q_EMPTY"] == 2 * 8
    assert sizes["SIDE"] == 2 * 64 * 4  # a slot a consumer: its 64 rows' lse
