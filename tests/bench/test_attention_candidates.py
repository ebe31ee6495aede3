"""bench/attention.py's candidates on the CPU: the FlashAttention-3 design's neighbours,
and for causal cases their persistent variants again with the heaviest tiles first."""

from __future__ import annotations

import pytest

from bench.attention import _design_neighbours, _heaviest_first
from codegen import feasibility
from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_spec
from scheduler_search.space import ScheduleSpace
from scheduler_search.sprogram.primitives import ScheduleError

DEVICE = get_device("h200")


def _space(causal: bool) -> ScheduleSpace:
    spec = parse_spec("attention", {"batch": 8, "heads": 32, "kv_heads": 8, "seq_q": 2048,
                                    "seq_kv": 2048, "head_dim": 128, "causal": causal,
                                    "dtype": "float16", "layout": "bhsd"})
    return ScheduleSpace(spec, DEVICE, feasibility("attention", DEVICE))


def test_without_a_causal_mask_there_is_no_heaviest_first_order() -> None:
    space = _space(causal=False)
    with pytest.raises(ScheduleError, match="raster_heaviest_first"):
        _heaviest_first(space, _design_neighbours(space), set())


def test_causal_cases_add_the_persistent_designs_heaviest_first() -> None:
    space = _space(causal=True)
    designs = _design_neighbours(space)
    hashes = {sp.hash for sp in designs}
    twins = [sp for _, sp in _heaviest_first(space, designs, set(hashes))]
    persistent = [sp for sp in designs if sp.choices["persistent"]]
    assert len(twins) == len(persistent) > 0
    assert all(sp.choices["raster_heaviest_first"] and sp.choices["persistent"]
               for sp in twins)
    assert not {sp.hash for sp in twins} & hashes
    assert {(sp.choices | {"raster_heaviest_first": False})["tile_kv"] for sp in twins} == {
        sp.choices["tile_kv"] for sp in persistent}
