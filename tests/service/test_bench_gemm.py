"""bench/gemm.py without a GPU: its suites (plain, fused epilogues, FP8) prepare the spec
each names (with the other shapes' best structures), the quick timing's leaders are
re-timed with the spec's peers and the fastest by that timing is kept, and a failing peer
leaves the kernel's figures."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from service_helpers import FixedLatencyPool, bench_module


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return bench_module("gemm")


def _winner(bench: ModuleType, params: dict[str, Any],
            choices: dict[str, Any] | None = None) -> dict[str, Any]:
    from codegen import render
    from scheduler_search.hardware import get_device
    from scheduler_search.ops import parse_spec
    from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED
    from scheduler_search.sprogram import plan_sprogram

    spec = parse_spec("gemm", params)
    sprogram = plan_sprogram(spec, get_device("h200"), choices or GEMM_WARP_SPECIALIZED)
    return {"hash": sprogram.hash, "choices": sprogram.choices,
            "artifact": render(sprogram, spec, get_device("h200")).to_dict()}


@pytest.mark.parametrize(("params", "peers"), [
    ({"m": 1024, "n": 1024, "k": 1024, "dtype": "float16"}, ["cublas"]),
    ({"m": 1024, "n": 1024, "k": 1024, "dtype": "float16",
      "epilogue": {"bias": True, "act": "gelu_tanh"}}, ["cublaslt_epilogue", "torch_epilogue"]),
    ({"m": 1024, "n": 1024, "k": 1024, "dtype": "float16",
      "epilogue": {"bias": True, "residual": True}}, ["torch_epilogue", "cublaslt_epilogue"]),
    ({"m": 1024, "n": 1024, "k": 1024, "dtype": "float8_e4m3", "b_layout": "nk"},
     ["scaled_mm"]),
])
def test_retime_times_the_kernel_with_the_specs_peers(bench: ModuleType, params: dict[str, Any],
                                                      peers: list[str]) -> None:
    pool = FixedLatencyPool(100.0, 150.0, None)
    args = SimpleNamespace(rounds=3, deadline=20.0, peer=None)
    record = bench._retime(pool, params, [_winner(bench, params)], final=None, args=args)
    assert len(pool.rounds) == 3
    assert all([j.baseline for j in r] == [None, *peers] for r in pool.rounds)
    assert record["peer"] == peers[0] and record["pipetune_us"] == 100.0
    assert record["ratio"] == pytest.approx(1.5) and record["peers_us"] == {peers[0]: 150.0}
    if len(peers) > 1:  # the second peer failed: reported, no ratio for it
        assert "peer unavailable" in record["peer_errors"][peers[1]]


def test_a_named_peer_is_the_one_the_ratio_is_against(bench: ModuleType) -> None:
    """``--peer cutlass_sm80``: Ampere-class kernels are judged against CUTLASS's."""
    params = {"m": 1024, "n": 1024, "k": 1024, "dtype": "float16"}
    pool = FixedLatencyPool(100.0, 120.0, None)
    args = SimpleNamespace(rounds=1, deadline=20.0, peer="cutlass_sm80")
    record = bench._retime(pool, params, [_winner(bench, params)], final=None, args=args)
    assert [j.baseline for j in pool.rounds[0]] == [None, "cutlass_sm80"]
    assert record["peer"] == "cutlass_sm80" and record["ratio"] == pytest.approx(1.2)


def test_the_leader_fastest_by_the_final_timing_is_kept(bench: ModuleType) -> None:
    """The quick timing's first is not always the fastest re-timed: the leaders and the
    peer share each round, and the case's kernel is the fastest leader."""
    from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED

    params = {"m": 1024, "n": 1024, "k": 1024, "dtype": "float16"}
    leaders = [_winner(bench, params),
               _winner(bench, params, {**GEMM_WARP_SPECIALIZED, "raster_swizzle": 4})]
    pool = FixedLatencyPool(120.0, 100.0, 110.0)
    record = bench._retime(pool, params, leaders, final=None,
                           args=SimpleNamespace(rounds=2, deadline=20.0, peer=None))
    assert all([j.baseline for j in r] == [None, None, "cublas"] for r in pool.rounds)
    assert record["leader_kept"] == 1 and record["leaders_us"] == [120.0, 100.0]
    assert record["schedule_hash"] == leaders[1]["hash"]
    assert record["ratio"] == pytest.approx(1.1)


@pytest.mark.parametrize(("suite", "latencies", "peer", "floor", "met"), [
    ("bias_gelu", (100.0, 95.0, 130.0), "cublaslt_epilogue", 1.0, False),
    ("bias_residual", (100.0, 120.0, 110.0), "torch_epilogue", 1.15, True),
])
def test_an_epilogue_suite_reports_each_peer_and_its_floor(
        bench: ModuleType, capsys: pytest.CaptureFixture[str], suite: str,
        latencies: tuple[float, ...], peer: str, floor: float, met: bool) -> None:
    """Each case's ratio against cuBLASLt's call and against the unfused sequence, the
    geometric mean against each, and the suite judged by the peer that counts."""
    params = {"m": 1024, "n": 1024, "k": 1024, "dtype": "float16", "b_layout": "nk",
              "epilogue": bench.EPILOGUES[suite]}
    args = SimpleNamespace(rounds=1, deadline=20.0, top=1, leaders=1, peer=None)
    record = bench._retime(FixedLatencyPool(*latencies), params, [_winner(bench, params)],
                           final=None, args=args)
    results = [{"case": bench._case_name(params), "params": params, **record,
                "candidates_ok": "1/1"}]
    timing = SimpleNamespace(to_dict=dict)
    doc = {"epilogue": suite, "cases": [{"params": params}]}
    summary = bench._summary(args, doc, timing, timing, {}, results, 0.0)
    assert summary["epilogue"]["bias"] and summary["acceptance"]["peer"] == peer
    assert summary["acceptance"]["floor"] == floor and summary["acceptance"]["met"] is met
    ratios = {name: g["geomean"] for name, g in summary["geomean_vs_peers"].items()}
    baseline_us, other_us = latencies[1:]
    other = "torch_epilogue" if peer == "cublaslt_epilogue" else "cublaslt_epilogue"
    assert ratios == pytest.approx({peer: baseline_us / 100.0, other: other_us / 100.0})
    bench.print_table(summary)
    table = capsys.readouterr().out
    assert "cuBLASLt us" in table and "unfused us" in table
    assert f"acceptance: vs {peer}" in table and ("NOT met" in table) is not met


@pytest.mark.slow
def test_prepare_renders_the_suite_the_flags_name(bench: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "fp8.json.gz"
    # tile_k=128 (the k step of this slice's best): the same 44 candidates as without it,
    # in half the time.
    bench.main(["prepare", "--dtypes", "float8_e4m3", "--layouts", "nk", "--shapes",
                "4096x4096x4096", "--top", "2", "--raster-top", "0", "--pool", "10",
                "--epilogue", "bias_gelu", "--fix", "warp_specialized=true",
                "consumer_warpgroups=2", "persistent=true", "tile_k=128", "--out", str(out)])
    with gzip.open(out, "rt") as f:
        doc = json.load(f)
    (case,) = doc["cases"]
    assert doc["epilogue"] == "bias_gelu"
    assert case["params"]["dtype"] == "float8_e4m3" and case["params"]["b_layout"] == "nk"
    assert case["params"]["epilogue"] == {"scale": 1.0, "bias": True, "act": "gelu_tanh",
                                          "residual": False}
    assert {k for k in case["candidates"][0] if k.startswith("float")} == {"float8_e4m3"}
    # --fix ranked only its slice of the space.
    assert all(e["float8_e4m3"]["choices"]["consumer_warpgroups"] == 2 for e in case["candidates"])


@pytest.mark.slow
def test_prepare_tries_the_best_structures_of_the_other_shapes(bench: ModuleType,
                                                                tmp_path: Path) -> None:
    out = tmp_path / "two.json.gz"
    # tile_k=64 (the hand-written design's k step) halves the ranking of the slice, and
    # clusters held at 1 halve it again.
    bench.main(["prepare", "--layouts", "kn", "--shapes", "4096x4096x4096", "128x8192x8192",
                "--top", "2", "--raster-top", "0", "--pool", "40", "--cross", "2",
                "--dtypes", "float16", "--fix", "warp_specialized=true", "persistent=true",
                "consumer_warpgroups=2", "tile_k=64", "cluster_size=1",
                "--out", str(out)])
    with gzip.open(out, "rt") as f:
        big, small = json.load(f)["cases"]

    def structures(case: dict[str, Any], *sources: str) -> set[tuple]:
        return {bench._structure(e["float16"]["choices"]) for e in case["candidates"]
                if e["source"] in sources}

    # What the big shape borrowed is the small one's own ranking (where valid there), and
    # nothing it had already (the big one's best stream-K shares are no schedule of the
    # small one, whose 32 tiles make less than two waves).
    borrowed = structures(big, "borrowed")
    assert borrowed and borrowed <= structures(small, "ranked")
    assert not borrowed & structures(big, "ranked", "raster", "cluster", "stream-k", "design")
    # The hand-written design is tried in its tile orders, as the service's first batch.
    designs = [e["float16"]["choices"] for e in big["candidates"] if e["source"] == "design"]
    orders = {(c.get("raster_major"), c.get("raster_swizzle")) for c in designs}
    assert {(None, None), ("n", 8), ("m", 16)} <= orders
