"""bench/range_measurements.py on a range run of the simulated device: every measurement
of the run comes out by candidate and size, with the stored bucket table, and a second
database appends to the same file."""

from __future__ import annotations

import itertools
import json
import sqlite3
from pathlib import Path
from types import ModuleType

import pytest
from service_helpers import bench_module

import pipetune

FIXED = {"n": 1024, "k": 1024, "dtype": "float16"}


@pytest.fixture
def exported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, ModuleType]:
    """A range run of the simulated device in its own database, exported with label
    ``first``: (the database, the JSON file, the bench module)."""
    database = tmp_path / "gemm.db"
    monkeypatch.setenv("PIPETUNE_RANGE_SEARCH", '{"samples_per_anchor": 24, "anchors": 3}')
    result = pipetune.tune("gemm", device="sim:h200", budget={"trials": 16},
                           database_url=f"sqlite:///{database}", progress=False,
                           m={"min": 1, "max": 2048}, **FIXED)
    assert result.status == "succeeded"
    bench = bench_module("range_measurements")
    out = tmp_path / "measurements.json"
    assert bench.main([str(database), "--label", "first", "--out", str(out)]) == 0
    return database, out, bench


def test_every_measurement_of_a_range_run_by_candidate(
        exported: tuple[Path, Path, ModuleType]) -> None:
    database, out, _ = exported
    [run] = json.loads(out.read_text())["runs"]
    assert (run["op"], run["dim"], run["label"]) == ("gemm", "m", "first")
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


def test_a_second_database_appends_its_run(exported: tuple[Path, Path, ModuleType]) -> None:
    database, out, bench = exported
    assert bench.main([str(database), "--label", "second", "--append", "--out", str(out)]) == 0
    runs = json.loads(out.read_text())["runs"]
    assert [r["label"] for r in runs] == ["first", "second"]
    assert runs[0]["candidates"] == runs[1]["candidates"]
