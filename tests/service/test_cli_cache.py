"""The cache from the command line: ``pipetune runs``, ``pipetune schedules``,
``pipetune tune --force / --extend``, and ``pipetune cache export / import`` between two
databases (idempotent, the faster schedule kept, a bad file refused naming where)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from service_helpers import SMALL_GEMM, tune_body

from service.cli import main
from service.core.config import Settings
from service.main import create_app

GEMM_ARGS = ["gemm", "--m", "1024", "--n", "1024", "--k", "1024", "--dtype", "fp16"]


def _tune(url: str, *extra: str, device: str = "sim:h200", trials: int = 6) -> None:
    argv = ["tune", *GEMM_ARGS, "--device", device, "--trials", str(trials),
            "--database-url", url, *extra]
    assert main(argv) == 0


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_runs_and_schedules_list_and_filter(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ["--database-url", database_url]
    assert main(["runs", *url]) == 0 and "no runs yet" in capsys.readouterr().out
    _tune(database_url)
    _tune(database_url, device="sim:h100", trials=4)
    _tune(database_url, "--force", trials=4)  # a cache hit, tuned again
    _tune(database_url, "--extend", trials=3)  # the newest run, 3 trials more
    capsys.readouterr()

    runs = _json(capsys, "runs", *url)
    assert runs["count"] == 3 and [r["id"] for r in runs["data"]] == [3, 2, 1]
    assert runs["data"][0]["trials_done"] == 7 and runs["data"][0]["budget"]["trials"] == 7
    assert all(r["status"] == "succeeded" for r in runs["data"])
    h100 = _json(capsys, "runs", "--device", "sim:h100", *url)
    assert [r["id"] for r in h100["data"]] == [2]
    assert _json(capsys, "runs", "--status", "cancelled", *url)["count"] == 0
    assert main(["runs", "--limit", "1", *url]) == 0
    text = capsys.readouterr().out
    assert "succeeded" in text and "7/7" in text and "(1 of 3; --limit for more)" in text

    schedules = _json(capsys, "schedules", "--op", "gemm", *url)
    assert schedules["count"] == 2
    assert {s["device"] for s in schedules["data"]} == {"sim:h200", "sim:h100"}
    assert _json(capsys, "schedules", "--op", "attention", *url)["count"] == 0
    assert main(["schedules", "--device", "sim:h100", *url]) == 0
    text = capsys.readouterr().out
    assert "sim:h100" in text and "sim:h200" not in text and "m=1024 n=1024" in text

    assert main(["runs", "--device", "h200", *url]) == 2
    assert "--device: unknown device 'h200'" in capsys.readouterr().err
    assert main(["schedules", "--limit", "0", *url]) == 2
    with pytest.raises(SystemExit):
        main(["tune", *GEMM_ARGS, "--force", "--extend", *url])


def test_cache_export_import_between_databases(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _tune(database_url)
    _tune(database_url, device="sim:h100", trials=4)
    exported = tmp_path / "cache.json"
    assert main(["cache", "export", str(exported), "--database-url", database_url]) == 0
    assert "exported 2 schedules" in capsys.readouterr().out
    data = json.loads(exported.read_text())
    assert data["format"] == "pipetune-cache" and len(data["workloads"]) == 1
    assert len(data["devices"]) == 2 and all(s["kernel"] for s in data["schedules"])

    other = f"sqlite:///{tmp_path / 'other.db'}"
    assert main(["cache", "import", str(exported), "--database-url", other]) == 0
    assert "2 new, 0 faster than the cached one, 0 kept" in capsys.readouterr().out
    assert main(["cache", "import", str(exported), "--database-url", other]) == 0
    assert "0 new, 0 faster than the cached one, 2 kept" in capsys.readouterr().out
    imported = _json(capsys, "schedules", "--database-url", other)["data"]
    originals = _json(capsys, "schedules", "--database-url", database_url)["data"]
    assert sorted((s["schedule_hash"], s["latency_us"], s["kernel_hash"]) for s in imported) \
        == sorted((s["schedule_hash"], s["latency_us"], s["kernel_hash"]) for s in originals)
    assert all(s["run_id"] is None for s in imported)

    # A faster schedule replaces the cached one; a slower one leaves it.
    data["schedules"][0]["latency_us"] /= 2
    data["schedules"][1]["latency_us"] *= 2
    exported.write_text(json.dumps(data))
    assert main(["cache", "import", str(exported), "--database-url", database_url]) == 0
    assert "0 new, 1 faster than the cached one, 1 kept" in capsys.readouterr().out
    after = {s["device"]: s["latency_us"] for s in
             _json(capsys, "schedules", "--database-url", database_url)["data"]}
    first = {s["device"]: s["latency_us"] for s in originals}
    faster_device = next(d["name"] for d in data["devices"]
                         if d["key"] == data["schedules"][0]["device"])
    for device, latency in after.items():
        assert latency == (first[device] / 2 if device == faster_device else first[device])

    # The tune of an imported workload is a cache hit there (no run in that database).
    with TestClient(create_app(Settings(database_url=other, data_dir=tmp_path),
                               run_background=False)) as client:
        hit = client.post("/v1/tune", json=tune_body(SMALL_GEMM))
    assert hit.status_code == 200 and hit.json()["cached"] is True
    assert hit.json()["run"] is None and hit.json()["schedule"]["run_id"] is None
    # The kernel came along.
    assert main(["export", imported[0]["kernel_hash"], "--out", str(tmp_path / "cu"),
                 "--database-url", other]) == 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["schedules"][0].update(latency_us=-1.0),
         "schedules[0].latency_us: Input should be greater than 0"),
        (lambda d: d["schedules"][0].update(device="f" * 64),
         f"schedules[0].device: no device {'f' * 64}"),
        (lambda d: d["workloads"][0]["params"].update(m=1000),
         "workloads[0].key: does not match its params"),
        (lambda d: d["workloads"][0]["params"].update(m=0), "workloads[0].params: not a valid"),
        (lambda d: d["schedules"][0].update(schedule_hash="0" * 64),
         "schedules[0].schedule_hash: not its schedule's"),
        (lambda d: d["schedules"][0]["kernel"].update(hash="0" * 64),
         "schedules[0].kernel.hash: not its artifact's"),
        (lambda d: d.update(version=3), "version: 3 is not one this pipetune reads"),
        (lambda d: d.pop("format"), 'not a pipetune cache file'),
    ],
)
def test_a_bad_cache_file_imports_nothing_and_says_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change, message: str
) -> None:
    url = f"sqlite:///{tmp_path / 'cache.db'}"
    _tune(url, trials=4)
    path = tmp_path / "cache.json"
    assert main(["cache", "export", str(path), "--database-url", url]) == 0
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    target = f"sqlite:///{tmp_path / 'target.db'}"
    capsys.readouterr()
    assert main(["cache", "import", str(path), "--database-url", target]) == 2
    err = capsys.readouterr().err
    assert message in err and "nothing imported" in err
    assert _json(capsys, "schedules", "--database-url", target)["count"] == 0


def test_unreadable_cache_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = ["--database-url", f"sqlite:///{tmp_path / 'c.db'}"]
    assert main(["cache", "import", str(tmp_path / "missing.json"), *url]) == 2
    assert "cannot read it" in capsys.readouterr().err
    (tmp_path / "broken.json").write_text("{not json")
    assert main(["cache", "import", str(tmp_path / "broken.json"), *url]) == 2
    assert "not JSON" in capsys.readouterr().err
