"""bench/gemm.py without a GPU: its suites (plain, fused epilogues, FP8) prepare the spec
each names, and the re-timing of a kernel against the spec's peers keeps the kernel's
figures when a peer fails."""

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


def _winner(bench: ModuleType, params: dict[str, Any]) -> dict[str, Any]:
    from codegen import render
    from scheduler_search.hardware import get_device
    from scheduler_search.ops import parse_spec
    from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED
    from scheduler_search.sprogram import plan_sprogram

    spec = parse_spec("gemm", params)
    sprogram = plan_sprogram(spec, get_device("h200"), GEMM_WARP_SPECIALIZED)
    return {"hash": sprogram.hash, "choices": sprogram.choices,
            "artifact": render(sprogram, spec, get_device("h200")).to_dict()}


@pytest.mark.parametrize(("params", "peers"), [
    ({"m": 1024, "n": 1024, "k": 1024, "dtype": "float16"}, ["cublas"]),
    ({"m": 1024, "n": 1024, "k": 1024, "dtype": "float16",
      "epilogue": {"bias": True, "act": "gelu_tanh"}}, ["torch_epilogue", "cublaslt_epilogue"]),
    ({"m": 1024, "n": 1024, "k": 1024, "dtype": "float8_e4m3", "b_layout": "nk"},
     ["scaled_mm"]),
])
def test_retime_times_the_kernel_with_the_specs_peers(bench: ModuleType, params: dict[str, Any],
                                                      peers: list[str]) -> None:
    pool = FixedLatencyPool(100.0, 150.0, None)
    args = SimpleNamespace(rounds=3, deadline=20.0)
    record = bench._retime(pool, params, _winner(bench, params), final=None, args=args)
    assert len(pool.rounds) == 3
    assert all([j.baseline for j in r] == [None, *peers] for r in pool.rounds)
    assert record["peer"] == peers[0] and record["pipetune_us"] == 100.0
    assert record["ratio"] == pytest.approx(1.5) and record["peers_us"] == {peers[0]: 150.0}
    if len(peers) > 1:  # the second peer failed: reported, no ratio for it
        assert "peer unavailable" in record["peer_errors"][peers[1]]


def test_prepare_renders_the_suite_the_flags_name(bench: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "fp8.json.gz"
    bench.main(["prepare", "--dtypes", "float8_e4m3", "--layouts", "nk", "--shapes",
                "4096x4096x4096", "--top", "2", "--raster-top", "0", "--pool", "10",
                "--epilogue", "bias_gelu", "--out", str(out)])
    with gzip.open(out, "rt") as f:
        doc = json.load(f)
    (case,) = doc["cases"]
    assert doc["epilogue"] == "bias_gelu"
    assert case["params"]["dtype"] == "float8_e4m3" and case["params"]["b_layout"] == "nk"
    assert case["params"]["epilogue"] == {"scale": 1.0, "bias": True, "act": "gelu",
                                          "residual": False}
    assert {k for k in case["candidates"][0] if k.startswith("float")} == {"float8_e4m3"}
