"""Tuned ranges carried by ``pipetune cache export / import`` (docs/dynamic.md): a table
exported from SQLite, imported into PostgreSQL and back, serves an exact size inside it
there; re-importing changes nothing, a faster table replaces the cached one, a file
without ranges (version 1) still imports, and a bad range imports nothing, naming where."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from service_databases import fresh_database
from service_helpers import service_settings

import pipetune
from codegen import RangeArtifact
from service.cli import main
from service.main import create_app

FIXED = {"n": 1024, "k": 1024, "dtype": "float16"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A SQLite cache holding a tuned range of m 1..2048 and an exact GEMM, exported."""
    directory = tmp_path_factory.mktemp("source")
    url = f"sqlite:///{directory / 'source.db'}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PIPETUNE_RANGE_SEARCH", '{"samples_per_anchor": 24, "anchors": 3}')
        kwargs = {"device": "sim:h200", "budget": {"trials": 16}, "database_url": url,
                  "progress": False, **FIXED}
        assert pipetune.tune("gemm", m={"min": 1, "max": 2048}, **kwargs).status == "succeeded"
        assert pipetune.tune("gemm", m=4096, **kwargs).status == "succeeded"
    path = directory / "cache.json"
    assert main(["cache", "export", str(path), "--database-url", url]) == 0
    return {"url": url, "data": json.loads(path.read_text())}


def _write(tmp_path: Path, data: dict[str, Any], name: str = "cache.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def _import(path: Path, url: str, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["cache", "import", str(path), "--database-url", url]) == 0
    return capsys.readouterr().out


def _ranges(url: str, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    """The cache's range tables as the export writes them."""
    assert main(["cache", "export", "-", "--database-url", url]) == 0
    return json.loads(capsys.readouterr().out)["ranges"]


def test_an_export_holds_the_answering_tables_with_their_kernels(
        exported: dict[str, Any]) -> None:
    data = exported["data"]
    assert data["version"] == 2 and len(data["schedules"]) == 1 and len(data["ranges"]) == 1
    table = data["ranges"][0]
    assert (table["op"], table["dim"], table["low"], table["high"]) == ("gemm", "m", 1, 2048)
    assert table["device"] in {d["key"] for d in data["devices"]}
    kernels = {k["hash"] for k in table["kernels"]}
    assert kernels and {b["kernel_hash"] for b in table["buckets"]} == kernels


def test_ranges_travel_from_sqlite_to_postgresql_and_back(
        exported: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, exported["data"])
    with fresh_database("postgresql", tmp_path) as postgres:
        out = _import(path, postgres, capsys)
        assert "1 new" in out and "range tables: 1 new, 0 faster than the cached one, 0 kept" \
            in out
        again = _import(path, postgres, capsys)
        assert "range tables: 0 new, 0 faster than the cached one, 1 kept" in again
        assert _ranges(postgres, capsys) == exported["data"]["ranges"]
        _assert_serves_inside_the_range(postgres, tmp_path)
        capsys.readouterr()
        back = tmp_path / "back.json"
        assert main(["cache", "export", str(back), "--database-url", postgres]) == 0
        assert "exported 1 schedule and 1 range table" in capsys.readouterr().out
    # Back into the source: the same table, kept; nothing added.
    out = _import(back, exported["url"], capsys)
    assert "range tables: 0 new, 0 faster than the cached one, 1 kept" in out
    assert _ranges(exported["url"], capsys) == exported["data"]["ranges"]


def _assert_serves_inside_the_range(url: str, tmp_path: Path) -> None:
    """An exact size inside the imported range is a hit served by its bucket's kernel
    (no run in that database; the dashboard says imported), and the drop-ins' lookup
    finds the table."""
    from service.runs.in_process import cached_range
    from service.schemas import TuneRequest

    body = {"op": "gemm", "params": {**FIXED, "m": 300}, "device": "sim:h200",
            "budget": {"trials": 8}}
    with TestClient(create_app(service_settings(url, tmp_path), run_background=False)) as client:
        hit = client.post("/v1/tune", json=body)
        assert hit.status_code == 200, hit.text
        schedule = hit.json()["schedule"]
        assert hit.json()["cached"] and hit.json()["run"] is None
        assert schedule["range_id"] is not None and schedule["kernel_hash"]
        kernel = client.get(f"/v1/kernels/{schedule['kernel_hash']}").json()
        assert kernel["artifact"]["params"]["m"] == 300
        page = client.get(f"/ranges/{schedule['range_id']}").text  # the dashboard's
        assert "imported (<code>pipetune cache import</code>)" in page
    found = cached_range(TuneRequest(op="gemm", params={**FIXED, "m": 300}, device="sim:h200"),
                         url)
    assert found is not None and RangeArtifact.from_dict(found).high == 2048


def test_a_faster_table_replaces_the_cached_one_a_slower_one_does_not(
        exported: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = f"sqlite:///{tmp_path / 'target.db'}"
    _import(_write(tmp_path, exported["data"]), target, capsys)
    for factor, outcome in [(2.0, "0 faster than the cached one, 1 kept"),
                            (0.5, "1 faster than the cached one, 0 kept")]:
        data = copy.deepcopy(exported["data"])
        for bucket in data["ranges"][0]["buckets"]:
            bucket["latencies_us"] = {s: us * factor for s, us in bucket["latencies_us"].items()}
        assert f"range tables: 0 new, {outcome}" in _import(_write(tmp_path, data), target,
                                                             capsys)
    newest = _ranges(target, capsys)[0]["buckets"][0]["latencies_us"]
    original = exported["data"]["ranges"][0]["buckets"][0]["latencies_us"]
    assert newest == {s: us * 0.5 for s, us in original.items()}


def test_a_version_1_file_without_ranges_still_imports(
        exported: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = {k: v for k, v in exported["data"].items() if k != "ranges"} | {"version": 1}
    target = f"sqlite:///{tmp_path / 'target.db'}"
    out = _import(_write(tmp_path, old), target, capsys)
    assert "1 new, 0 faster than the cached one, 0 kept" in out and "range tables" not in out
    assert _ranges(target, capsys) == []


def _gap(data: dict[str, Any]) -> None:
    data["ranges"][0]["buckets"][-1]["low"] += 1


def _fixed_key(data: dict[str, Any]) -> None:
    data["ranges"][0]["params"]["k"] = 2048


def _kernel(data: dict[str, Any]) -> None:
    data["ranges"][0]["kernels"][0]["hash"] = "0" * 64


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.update(version=3), "version: 3 is not one this pipetune reads (1, 2)"),
    (lambda d: d.update(version=1), "a version 1 file has none"),
    (lambda d: d["ranges"][0].update(device="f" * 64), f"ranges[0].device: no device {'f' * 64}"),
    (lambda d: d["ranges"].append(d["ranges"][0]), "ranges[1]: a second table of the same range"),
    (_gap, "does not continue the range at"),
    (_fixed_key, "ranges[0].fixed_key: does not match its params"),
    (lambda d: d["ranges"][0].update(dim="n"), "ranges[0].dim: n is not a range of its params"),
    (lambda d: d["ranges"][0]["buckets"][0].update(schedule_hash="0" * 64),
     "ranges[0].buckets[0].schedule_hash: not its schedule's"),
    (_kernel, "not in the range's kernels"),
    (lambda d: d["ranges"][0]["buckets"][0]["latencies_us"].update({"1": -1.0}),
     "ranges[0].buckets[0].latencies_us.1: Input should be greater than 0"),
])
def test_a_bad_range_imports_nothing_and_says_where(
        exported: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        change: Callable[[dict[str, Any]], None], message: str) -> None:
    data = copy.deepcopy(exported["data"])
    change(data)
    target = f"sqlite:///{tmp_path / 'target.db'}"
    capsys.readouterr()
    assert main(["cache", "import", str(_write(tmp_path, data)), "--database-url", target]) == 2
    err = capsys.readouterr().err
    assert message in err and "nothing imported" in err, err
    assert main(["schedules", "--json", "--database-url", target]) == 0
    assert json.loads(capsys.readouterr().out)["count"] == 0 and _ranges(target, capsys) == []
