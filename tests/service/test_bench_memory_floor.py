"""bench/memory_floor.py without a GPU: its cases are the chunk-state suite with their
compulsory bytes, and the ceiling is the peer's time over the floor's."""

from __future__ import annotations

import math

import pytest

from bench import memory_floor as bench


def test_cases_are_the_suite_with_x_b_dt_da_and_fp32_states() -> None:
    from scheduler_search.ops.suites import mamba2_suite

    cases = bench.cases()
    assert [c["params"] for c in cases] == mamba2_suite()
    p = cases[2]["params"]  # (8, 4096): 80 heads, p 64, n 128, chunk 256
    assert (p["batch"], p["seqlen"]) == (8, 4096)
    positions, nchunks = p["batch"] * p["seqlen"], p["seqlen"] // p["chunk_size"]
    x = positions * p["nheads"] * p["headdim"] * 2
    b = positions * p["ngroups"] * p["dstate"] * 2
    dt_da = 2 * positions * p["nheads"] * 4
    states = p["batch"] * nchunks * p["nheads"] * p["headdim"] * p["dstate"] * 4
    assert cases[2]["min_bytes"] == x + b + dt_da + states


def test_the_ceiling_is_the_peer_over_the_floor() -> None:
    rows = [{"min_bytes": 4_000_000, "floor_us": 1.0, "peer_us": 2.0},
            {"min_bytes": 8_000_000, "floor_us": 2.0, "peer_us": 16.0},
            {"min_bytes": 1_000_000, "floor_us": 1.0, "peer_us": None}]
    summary = bench.summarise(rows)
    assert [r.get("ceiling_ratio") for r in summary["cases"]] == [2.0, 8.0, None]
    assert summary["cases"][0]["copy_tbps"] == pytest.approx(4.0)
    assert summary["ceiling_geomean"] == pytest.approx(math.sqrt(16.0))
    assert summary["ceiling_cases"] == 2
