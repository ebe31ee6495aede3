"""bench/attention_training.py on the CPU: it pairs the forward and backward suites' bhsd
cases by their shape, renders each op's kernel from the choices its run kept, and its
drop-ins' cache holds exactly those two kernels."""

from __future__ import annotations

import json
from pathlib import Path

from bench.attention_backward import prepare_case, suite_cases
from bench.attention_training import artifacts, paired_cases, serving_lookup, summarize

FORWARD_RESULTS = Path("bench/results/attention-suite-bhsd-2026-12-05.json")


def _docs() -> tuple[dict, dict]:
    """The forward suite's results and a backward run over the same causal d64 case, in
    bhsd and in bshd (one candidate's choices kept for each)."""
    forward = json.loads(FORWARD_RESULTS.read_text())
    params = next(p for p in suite_cases(["bhsd"]) if p["causal"] and p["head_dim"] == 64)
    choices = prepare_case(params, "h200", top=1, pool=50)["candidates"][0]["float16"]["choices"]
    backward = {"cases": [{"params": {**params, "layout": layout}, "choices": choices}
                          for layout in ("bhsd", "bshd")]}
    backward["cases"].append({"params": {**params, "seq_q": 4000, "seq_kv": 4000},
                              "error": "no candidate was correct"})
    return forward, backward


def test_cases_pair_by_shape_in_bhsd_alone() -> None:
    forward, backward = _docs()
    cases = paired_cases(forward, backward)
    assert len(cases) == 1
    case = cases[0]
    assert case["params"]["layout"] == "bhsd" and "deterministic" not in case["params"]
    kept = next(c for c in forward["cases"]
                if c["params"] == case["params"])
    assert case["forward"] == kept["choices"]
    assert case["backward"] == backward["cases"][0]["choices"]
    assert case["backward_deterministic"] is False


def test_the_drop_ins_cache_holds_the_two_rendered_kernels_alone() -> None:
    case = paired_cases(*_docs())[0]
    rendered = artifacts(case, "h200")
    assert rendered["attention"]["op"] == "attention"
    assert rendered["attention_backward"]["op"] == "attention_backward"
    lookup = serving_lookup(case, rendered)
    params = case["params"]
    assert lookup("attention", params, 0) is rendered["attention"]
    assert lookup("attention_backward", {**params, "deterministic": False},
                  0) is rendered["attention_backward"]
    assert lookup("attention_backward", {**params, "deterministic": True}, 0) is None
    assert lookup("attention", {**params, "causal": not params["causal"]}, 0) is None


def test_the_summary_counts_only_correct_cases_served_by_kernels() -> None:
    def row(ratio: float, correct: bool = True, served: bool = True) -> dict:
        return {"correct": correct, "served_by_kernels": served, "eager_ratio": ratio,
                "back_to_back_ratio": ratio, "graph_ratio": ratio}

    summary = summarize([row(1.0), row(4.0), row(0.1, correct=False), row(0.2, served=False)])
    assert summary["counted"] == 2 and summary["cases"] == 4
    assert abs(summary["graph_geomean"] - 2.0) < 1e-12
    assert summary["eager_min"] == 1.0
