"""bench/memory_floor.py without a GPU: its cases are the chunk-state suite with their
compulsory bytes, and the ceiling is the peer's time over the floor's."""

from __future__ import annotations

import math

import pytest

from bench import memory_floor as bench


def test_cases_are_the_suite_in_both_states_formats_with_their_compulsory_bytes() -> None:
    from scheduler_search.ops.suites import mamba2_suite

    cases = bench.cases()
    suite = mamba2_suite()
    assert [c["params"] for c in cases] == (
        [{**p, "states_in_fp32": True} for p in suite]
        + [{**p, "states_in_fp32": False} for p in suite])
    assert [c["case"] for c in cases][2::len(suite)] == ["state-8x4096", "state16-8x4096"]
    p = cases[2]["params"]  # (8, 4096): 80 heads, p 64, n 128, chunk 256
    positions, nchunks = p["batch"] * p["seqlen"], p["seqlen"] // p["chunk_size"]
    x = positions * p["nheads"] * p["headdim"] * 2
    b = positions * p["ngroups"] * p["dstate"] * 2
    dt_da = 2 * positions * p["nheads"] * 4
    states = p["batch"] * nchunks * p["nheads"] * p["headdim"] * p["dstate"]
    assert cases[2]["min_bytes"] == x + b + dt_da + 4 * states
    assert cases[2 + len(suite)]["min_bytes"] == x + b + dt_da + 2 * states  # fp16 states


def test_the_ceiling_is_the_peer_over_the_floor_per_states_format() -> None:
    rows = [{"variant": "state", "min_bytes": 4_000_000, "floor_us": 1.0, "peer_us": 2.0},
            {"variant": "state", "min_bytes": 8_000_000, "floor_us": 2.0, "peer_us": 16.0},
            {"variant": "state", "min_bytes": 1_000_000, "floor_us": 1.0, "peer_us": None},
            {"variant": "state16", "min_bytes": 1_000_000, "floor_us": 1.0, "peer_us": 3.0}]
    summary = bench.summarise(rows)
    assert [r.get("ceiling_ratio") for r in summary["cases"]] == [2.0, 8.0, None, 3.0]
    assert summary["cases"][0]["copy_tbps"] == pytest.approx(4.0)
    assert summary["ceiling_geomean"] == {"state": pytest.approx(math.sqrt(16.0)),
                                          "state16": pytest.approx(3.0)}
    assert summary["ceiling_cases"] == {"state": 2, "state16": 1}
