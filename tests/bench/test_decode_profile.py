"""bench/decode_profile.py's CPU half: the cases it profiles and the kernels it rebuilds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.decode_profile import artifact_of, stored_cases

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
STORED = RESULTS / "decode-fp8-llama-3-70b-tp8-2026-12-04.json"


def test_the_profiled_kernel_is_the_one_the_bench_timed() -> None:
    (case,) = stored_cases(STORED, ["gemm-128x1280x8192-fp8-nk"])
    artifact = artifact_of(case)
    assert artifact["schedule_hash"] == case["schedule"]["schedule_hash"]
    assert "__global__" in artifact["source"]


def test_cases_without_a_stored_schedule_are_named(tmp_path: Path) -> None:
    doc = json.loads(STORED.read_text())
    doc["cases"][0].pop("schedule")
    edited = tmp_path / "decode.json"
    edited.write_text(json.dumps(doc))
    assert len(stored_cases(edited, [])) == len(doc["cases"]) - 1
    with pytest.raises(SystemExit, match=doc["cases"][0]["case"]):
        stored_cases(edited, [doc["cases"][0]["case"]])
