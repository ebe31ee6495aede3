"""The attention backward as an operator: its fields and their errors, its contract (the
forward's o and lse as inputs, dq / dk / dv as outputs), five products of the forward's
size, its sTask graph, and a schedule space the cost model ranks on Hopper and Ampere."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from scheduler_search.hardware import get_device
from scheduler_search.ir import STaskKind
from scheduler_search.ops import parse_spec
from scheduler_search.space import ScheduleSpace, rank_top

BASE: dict[str, Any] = {"batch": 2, "heads": 32, "kv_heads": 8, "seq_q": 2048,
                        "seq_kv": 2048, "head_dim": 128, "causal": True, "dtype": "bfloat16"}


def test_the_contract_reads_the_forward_s_outputs_and_writes_three_gradients() -> None:
    spec = parse_spec("attention_backward", {**BASE, "layout": "bhsd"})
    tensors = {t.name: t for t in spec.tensors()}
    assert [t.name for t in spec.tensors()] == ["q", "k", "v", "o", "lse", "do",
                                                 "dq", "dk", "dv"]
    assert tensors["lse"].shape == (2, 32, 2048) and tensors["lse"].dtype == "float32"
    assert tensors["dk"].shape == tensors["k"].shape == (2, 8, 2048, 128)
    assert {t.role for n, t in tensors.items() if n.startswith("d") and n != "do"} == {"output"}
    assert tensors["o"].init.kind == "attention_o" and tensors["o"].init.causal
    assert tensors["lse"].init.heads_second


def test_five_products_of_the_forward_s_size() -> None:
    backward = parse_spec("attention_backward", BASE)
    forward = parse_spec("attention", {k: v for k, v in BASE.items()})
    assert backward.flops() == pytest.approx(2.5 * forward.flops())
    graph = backward.graph({"kv": 128, "q": 64})
    products = [t.name for t in graph.stasks if t.kind is STaskKind.MMA]
    assert products == ["mma_s", "mma_dv", "mma_dp", "mma_dk", "mma_dq"]
    assert graph.spatial_axes == ("kv",) and graph.reduction_axes == ("q",)
    assert graph.causal_pairs == (("kv", "q"),)


@pytest.mark.parametrize(("change", "field"), [
    ({"kv_heads": 5}, "kv_heads"),
    ({"head_dim": 72}, "head_dim"),
    ({"dtype": "float8_e4m3"}, "dtype"),
    ({"deterministic": "sometimes"}, "deterministic"),
])
def test_bad_fields_are_named(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as raised:
        parse_spec("attention_backward", {**BASE, **change})
    assert [e["loc"][-1] for e in raised.value.errors()] == [field]


@pytest.mark.parametrize("device", ["h200", "a100"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_the_space_is_ranked_on_hopper_and_ampere(device: str, head_dim: int) -> None:
    spec = parse_spec("attention_backward", {**BASE, "head_dim": head_dim})
    space = ScheduleSpace(spec, get_device(device))
    candidates, count = space.enumerate()
    assert candidates and count.valid > 0
    best = rank_top(space, candidates, 1)[0]
    # No faster than the tensor cores' peak allows.
    tflops = spec.flops() / (best.estimate.latency_us * 1e-6) / 1e12
    assert 0 < tflops <= get_device(device).tensor_tflops("bfloat16")


def test_key_tiles_may_stagger_their_trips_unless_dq_is_summed_in_order() -> None:
    """``raster_stagger`` is a choice where every key tile adds to dq in any order: not
    for a deterministic dq, nor for a GEMM (no sum shared by tiles); a schedule without
    it keeps the JSON (and hash) it had before the choice existed."""
    from scheduler_search.space.tables import knob_table
    from scheduler_search.sprogram import ScheduleError, plan_sprogram

    h200 = get_device("h200")
    free = parse_spec("attention_backward", BASE)
    ordered = parse_spec("attention_backward", {**BASE, "deterministic": True})
    gemm = parse_spec("gemm", {"m": 1024, "n": 1024, "k": 1024, "dtype": "float16"})
    offered = [any(k.name == "raster_stagger" for k in knob_table(spec, h200))
               for spec in (free, ordered, gemm)]
    assert offered == [True, False, False]
    choices = {"tile_kv": 128, "tile_q": 64, "stages_q": 2, "stages_do": 2}
    plain = plan_sprogram(free, h200, choices)
    staggered = plan_sprogram(free, h200, {**choices, "raster_stagger": True})
    assert "stagger" not in plain.to_dict()["raster"]
    assert staggered.to_dict()["raster"]["stagger"] is True
    assert staggered.hash != plain.hash
    for spec in (ordered, gemm):
        with pytest.raises(ScheduleError, match="raster_stagger"):
            plan_sprogram(spec, h200, {"raster_stagger": True})
