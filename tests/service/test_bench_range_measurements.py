"""bench/range_measurements.py on a range run of the simulated device: every measurement
of the run comes out by candidate and size, with the stored bucket table, and a second
database appends to the same file."""

from __future__ import annotations

import itertools
import json
import sqlite3
from pathlib import Path

import pytest
from service_helpers import bench_module

import pipetune

FIXED = {"n": 1024, "k": 1024, "dtype": "float16"}


def _range_database(tmp_path: Path, patch: pytest.MonkeyPatch, name: str) -> Path:
    path = tmp_path / name
    patch.setenv("PIPETUNE_RANGE_SEARCH", '{"samples_per_anchor": 24, "anchors": 3}')
    result = pipetune.tune("gemm", device="sim:h200", budget={"trials": 16},
                           database_url=f"sqlite:///{path}", progress=False,
                           m={"min": 1, "max": 2048}, **FIXED)
    assert result.status == "succeeded"
    return path


def test_every_measurement_of_a_range_run_by_candidate(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    bench = bench_module("range_measurements")
    database = _range_database(tmp_path, monkeypatch, "gemm.db")
    out = tmp_path / "measurements.json"
    assert bench.main([str(database), "--label", "x", "--out", str(out)]) == 0
    [run] = json.loads(out.read_text())["runs"]
    assert (run["op"], run["dim"], run["label"]) == ("gemm", "m", "x")
    assert run["params"]["m"] == {"min": 1, "max": 2048}
    with sqlite3.connect(database) as db:
        trials = db.execute("SELECT count(*) FROM pipetune_trials t JOIN pipetune_runs r "
                            "ON t.run_id = r.id WHERE r.kind = 'range'").fetchone()[0]
    pairs = [(c["schedule_hash"], size) for c in run["candidates"] for size in c["latency_us"]]
    assert len(pairs) == len(set(pairs)) == trials > 0
    assert all("m" not in c["choices"] and 1 <= int(size) <= 2048
               for c in run["candidates"] for size in c["latency_us"])
    assert any(us is not None for c in run["candidates"] for us in c["latency_us"].values())
    buckets = run["buckets"]
    assert buckets[0]["low"] == 1 and buckets[-1]["high"] == 2048
    assert all(a["high"] + 1 == b["low"] for a, b in itertools.pairwise(buckets))


def test_a_second_database_appends_its_run(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    bench = bench_module("range_measurements")
    database = _range_database(tmp_path, monkeypatch, "gemm.db")
    out = tmp_path / "measurements.json"
    assert bench.main([str(database), "--label", "first", "--out", str(out)]) == 0
    assert bench.main([str(database), "--label", "second", "--append", "--out", str(out)]) == 0
    runs = json.loads(out.read_text())["runs"]
    assert [r["label"] for r in runs] == ["first", "second"]
    assert runs[0]["candidates"] == runs[1]["candidates"]
