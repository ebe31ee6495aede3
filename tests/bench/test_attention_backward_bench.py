"""bench/attention_backward.py on the CPU: its cases are the attention suite's shapes, and
each case's candidates are distinct structures the cost model ranks best, rendered for
fp16 and bf16 from the same choices."""

from __future__ import annotations

import argparse
from typing import Any

from bench.attention_backward import STRUCTURE_KEYS, measure_case, prepare_case, suite_cases
from scheduler_search.ops.suites import attention_suite
from workers.protocol import Measurement, MeasurementStatus


def test_the_cases_are_the_attention_suite_s_shapes_in_each_layout() -> None:
    cases = suite_cases(["bshd", "bhsd"], deterministic=True)
    shapes = [p for p in attention_suite() if p["dtype"] == "float16"]
    assert len(cases) == 2 * len(shapes)
    assert all(c["deterministic"] and c["dtype"] == "float16" for c in cases)
    assert {c["layout"] for c in cases} == {"bshd", "bhsd"}


def test_a_causal_case_s_candidates_are_distinct_and_rendered_in_both_dtypes() -> None:
    params = next(p for p in suite_cases(["bhsd"]) if p["causal"] and p["head_dim"] == 64)
    prepared = prepare_case(params, "h200", top=4, pool=100)
    candidates = prepared["candidates"]
    assert 1 < len(candidates) <= 4
    structures = {tuple(c["float16"]["choices"].get(k) for k in STRUCTURE_KEYS)
                  for c in candidates}
    assert len(structures) == len(candidates)
    for candidate in candidates:
        fp16, bf16 = candidate["float16"], candidate["bfloat16"]
        assert fp16["choices"] == bf16["choices"]
        assert fp16["artifact"]["op"] == "attention_backward"
        assert fp16["artifact"]["params"]["dtype"] == "float16"
        assert bf16["artifact"]["params"]["dtype"] == "bfloat16"


def test_twins_time_each_structure_at_the_knob_s_other_options() -> None:
    """``--twins order persistent``: every ranked structure also with the other loop order
    and the other tile loop, where those build, each once."""
    params = next(p for p in suite_cases(["bhsd"]) if not p["causal"] and p["head_dim"] == 64)
    prepared = prepare_case(params, "h200", top=2, pool=50, twins=("order", "persistent"))
    ranked = [c for c in prepared["candidates"] if c["source"] == "cost model"]
    twins = [c for c in prepared["candidates"] if c["source"] == "twin"]
    assert len(ranked) == 2 and twins
    keys = [tuple(sorted(c["float16"]["choices"].items())) for c in prepared["candidates"]]
    assert len(set(keys)) == len(keys)
    for twin in twins:
        choices = twin["float16"]["choices"]
        assert any(sum(choices.get(k) != r["float16"]["choices"].get(k)
                       for k in set(choices) | set(r["float16"]["choices"])) == 1
                   for r in ranked)
    assert {c["float16"]["choices"]["order"] for c in prepared["candidates"]} == {
        "serial", "interleave"}


class _FailingPool:
    """A stand-in pool: records the kernels it is asked to measure; every one fails its
    check, so the case ends after its search."""

    def __init__(self) -> None:
        self.measured: list[str] = []

    def measure(self, jobs: list[Any]) -> list[Measurement]:
        self.measured += [job.artifact.schedule_hash for job in jobs]
        return [Measurement(status=MeasurementStatus.WRONG_RESULT, error="stand-in")
                for _ in jobs]


def test_the_search_measures_the_twins_beside_the_ranked_structures() -> None:
    """``--top`` counts the cost model's structures; the twins come on top of them (stop
    73's H100 run timed only the first ``--top`` candidates, so no twin ever ran)."""
    params = next(p for p in suite_cases(["bhsd"]) if not p["causal"] and p["head_dim"] == 64)
    prepared = prepare_case(params, "h200", top=2, pool=50, twins=("raster_stagger",))
    assert any(c["source"] == "twin" for c in prepared["candidates"])
    pool = _FailingPool()
    args = argparse.Namespace(top=2, deadline=30.0, device="h200", rerender=False,
                              dtypes=["float16"], rounds=1)
    records = measure_case(pool, prepared, None, None, args)
    assert pool.measured == [c["float16"]["artifact"]["schedule_hash"]
                             for c in prepared["candidates"]]
    assert records[0]["error"] == "no candidate was correct"
    assert [t["source"] for t in records[0]["searched"]] == [
        c["source"] for c in prepared["candidates"]]
