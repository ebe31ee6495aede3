"""The dashboard's pages and the JSON routes they draw from, through the app (TestClient),
on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import math

from dashboard_helpers import posted_run
from fastapi.testclient import TestClient
from service_helpers import SMALL_GEMM, tune_body
from sqlalchemy import text

from service.db import repositories as repo


def test_empty_dashboard(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "No runs" in page.text and 'id="runs-table"' in page.text
    assert "No runs" in client.get("/runs/table").text
    assert "No cached schedule" in client.get("/schedules").text
    missing = client.get("/runs/7")
    assert missing.status_code == 404 and "There is no run 7" in missing.text
    assert client.get("/schedules/7").status_code == 404
    assert client.get("/runs/0").status_code == 422
    for url in ("/v1/runs/7/convergence", "/v1/runs/7/importance", "/v1/runs/7/timeline",
                "/v1/runs/7/source", "/v1/schedules/7/timeline", "/v1/schedules/7/source"):
        response = client.get(url)
        assert response.status_code == 404, url
        assert "not found" in response.json()["detail"]


def test_static_files_and_plotly_offline(client: TestClient) -> None:
    css = client.get("/static/dashboard.css")
    assert css.status_code == 200 and "text/css" in css.headers["content-type"]
    for name in ("common", "run", "runs", "schedule"):
        script = client.get(f"/static/js/{name}.js")
        assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    plotly = client.get("/static/vendor/plotly.min.js")
    assert plotly.status_code == 200 and "javascript" in plotly.headers["content-type"]
    assert plotly.content.lstrip().startswith(b"/**") and b"plotly.js v" in plotly.content[:200]
    assert len(plotly.content) > 1_000_000
    assert plotly.headers["cache-control"].startswith("public")
    again = client.get("/static/vendor/plotly.min.js",
                       headers={"if-none-match": plotly.headers["etag"]})
    assert again.status_code == 304
    # The dashboard is not part of the API's schema.
    paths = client.get("/openapi.json").json()["paths"]
    assert "/" not in paths and "/runs/{run_id}" not in paths
    assert "/v1/runs/{run_id}/timeline" in paths


def test_runs_list_filters_and_run_page(shared_client: TestClient, shared_run: dict) -> None:
    client, finished_run = shared_client, shared_run
    run_id = finished_run["id"]
    page = client.get("/")
    assert f'data-run-id="{run_id}"' in page.text and 'data-status="succeeded"' in page.text
    assert "m=1024 n=1024 k=1024" in page.text and "sim:h200" in page.text
    assert finished_run["best"] and "µs" in page.text
    row = client.get("/runs/table").text
    assert f'href="/runs/{run_id}"' in row and "<html" not in row
    for query, shown in (
        ({"op": "gemm"}, True), ({"op": "attention"}, False), ({"status": "succeeded"}, True),
        ({"status": "failed"}, False), ({"device": "sim:h200"}, True),
        ({"device": "sim:a100"}, False), ({"status": "nonsense"}, True),
    ):
        html = client.get("/runs/table", params=query).text
        assert (f'data-run-id="{run_id}"' in html) is shown, query
    api = client.get("/v1/runs", params={"device": "sim:h200"}).json()
    assert api["count"] == 1
    assert client.get("/v1/runs", params={"device": "sim:h100"}).json()["count"] == 0

    run_page = client.get(f"/runs/{run_id}")
    assert run_page.status_code == 200
    for element in ("chart-trials", "chart-time", "timeline", "importance", "trials-table",
                    "kernel-source", "cancel-button", "/static/vendor/plotly.min.js"):
        assert element in run_page.text, element
    assert 'id="cancel-button" class="danger" type="button" hidden' in run_page.text
    # Every chart holds its place with a placeholder until it is drawn.
    assert run_page.text.count('class="chart-placeholder"') == 5  # 4 charts + the table
    # A simulated run's latencies are labelled estimates; no baseline is shown for it, a
    # caveat is. The timeline's caption is the GEMM's.
    assert 'id="best-latency">' in run_page.text and 'class="est"' in run_page.text
    assert 'id="estimate-card"' in run_page.text and 'id="baseline-card"' not in run_page.text
    assert "not a measurement" in run_page.text
    assert "load_a, load_b" in run_page.text and "GEMM · m=1024" in run_page.text
    assert 'data-budget-trials="16"' in run_page.text and "16/16 trials" in page.text
    assert 'class="num baseline-col"' not in page.text and "vs baseline" not in page.text


def test_baseline_column_only_where_a_baseline_exists(
    client: TestClient, finished_run: dict
) -> None:
    """A GPU run's baseline (set here as its final re-timing stores it) brings the column,
    on the runs list, the schedules page and the run page."""
    db = client.app.state.db
    with db.engine.begin() as connection:
        for table in ("pipetune_runs", "pipetune_schedules"):
            connection.execute(text(
                f"UPDATE {table} SET baseline = 'cublas', baseline_latency_us = 20.0"
            ))
    runs = client.get("/").text
    assert runs.count('class="num baseline-col"') == 2  # the header and the run's cell
    assert "vs baseline" in runs and "cuBLAS 20.00 µs ÷ ours" in runs
    schedules = client.get("/schedules").text
    assert schedules.count('class="num baseline-col"') == 2 and "×" in schedules


def test_seconds_budget_progress(idle_client: TestClient) -> None:
    """A budget of seconds alone is time progress, never ``0/10000 trials``."""
    body = {**tune_body(SMALL_GEMM), "budget": {"seconds": 90}}
    run = posted_run(idle_client.post("/v1/tune", json=body).json())
    listed = idle_client.get("/runs/table").text
    assert "0 trials · 0.0 s / 1 min 30 s" in listed and "10000" not in listed
    page = idle_client.get(f"/runs/{run['id']}").text
    assert 'data-budget-trials=""' in page and 'data-budget-seconds="90.0"' in page
    assert "of 1 min 30 s" in page and "10000" not in page
    both = {**tune_body({**SMALL_GEMM, "m": 2048}), "budget": {"seconds": 90, "trials": 40}}
    run = posted_run(idle_client.post("/v1/tune", json=both).json())
    page = idle_client.get(f"/runs/{run['id']}").text
    assert "of 40 trials measured" in page and "whichever comes first" in page


def test_trials_rows_hide_invalid_points(client: TestClient, finished_run: dict) -> None:
    """The run page's table leaves out the invalid points older runs stored, unless asked."""
    run_id = finished_run["id"]
    with repo.session_scope(client.app.state.db.sessions) as session:
        repo.add_trials(session, run_id=run_id, trials=[{
            "status": "invalid", "source": "search", "schedule_hash": None,
            "choices": {"tile_m": 512}, "latency_us": None, "predicted_us": None,
            "simulated": True, "error": "smem_exceeded", "measurement": None,
        }] * 3)
    every = client.get(f"/v1/runs/{run_id}/trials", params={"limit": 1000}).json()["data"]
    invalid = [t["number"] for t in every if t["status"] == "invalid"]
    assert len(invalid) >= 3
    valid = [t["number"] for t in every if t["status"] != "invalid"]
    url = f"/runs/{run_id}/trials"
    hidden = client.get(url, params={"limit": 1000}).json()
    assert [t["number"] for t in hidden["data"]] == valid and hidden["count"] == len(valid)
    shown = client.get(url, params={"limit": 1000, "invalid": "show"}).json()
    assert [t["number"] for t in shown["data"]] == sorted(valid + invalid)
    only = client.get(url, params={"status": "invalid"}).json()
    assert [t["number"] for t in only["data"]] == invalid
    by_latency = client.get(url, params={"order": "-latency_us", "limit": 3}).json()["data"]
    slowest = sorted((t["latency_us"] for t in every if t["latency_us"] is not None),
                     reverse=True)[:3]
    assert [t["latency_us"] for t in by_latency] == slowest
    assert client.get(url, params={"order": "error"}).status_code == 422
    assert client.get(url, params={"invalid": "maybe"}).status_code == 422


def test_convergence(shared_client: TestClient, shared_run: dict) -> None:
    client, finished_run = shared_client, shared_run
    run_id = finished_run["id"]
    data = client.get(f"/v1/runs/{run_id}/convergence").json()
    trials = client.get(f"/v1/runs/{run_id}/trials").json()
    assert data["count"] == trials["count"] and not data["downsampled"]
    assert data["measured"] == finished_run["trials_done"] == 16
    assert sum(data["statuses"].values()) == data["count"]
    assert data["trials"]["number"] == list(range(data["count"]))
    best = data["best"]["latency_us"]
    assert best == sorted(best, reverse=True) and len(set(best)) == len(best)
    assert math.isclose(best[-1], min(t["latency_us"] for t in trials["data"]
                                      if t["latency_us"] is not None))
    assert all(t >= 0 for t in data["trials"]["t_s"])
    assert data["trials"]["t_s"] == sorted(data["trials"]["t_s"])

    sampled = client.get(f"/v1/runs/{run_id}/convergence", params={"max_points": 10}).json()
    assert sampled["downsampled"] and sampled["count"] == data["count"]
    kept = set(sampled["trials"]["number"])
    assert set(data["best"]["number"]) <= kept and data["count"] - 1 in kept
    assert len(kept) <= 10 + len(data["best"]["number"]) + 1
    assert client.get(f"/v1/runs/{run_id}/convergence",
                      params={"max_points": 1}).status_code == 422


def test_trials_sorting(shared_client: TestClient, shared_run: dict) -> None:
    client, finished_run = shared_client, shared_run
    url = f"/v1/runs/{finished_run['id']}/trials"
    by_latency = client.get(url, params={"order": "latency_us"}).json()["data"]
    latencies = [t["latency_us"] for t in by_latency]
    measured = [x for x in latencies if x is not None]
    assert measured == sorted(measured) and latencies[: len(measured)] == measured
    slowest = client.get(url, params={"order": "-latency_us", "limit": 3}).json()["data"]
    assert [t["latency_us"] for t in slowest] == sorted(measured, reverse=True)[:3]
    newest = client.get(url, params={"order": "-number", "limit": 5, "offset": 1}).json()
    numbers = [t["number"] for t in newest["data"]]
    assert numbers == list(range(newest["count"] - 2, newest["count"] - 7, -1))
    by_status = [t["status"] for t in client.get(url, params={"order": "status"}).json()["data"]]
    assert by_status == sorted(by_status)
    bad = client.get(url, params={"order": "error"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "order"


def test_importance(shared_client: TestClient, shared_run: dict) -> None:
    client, finished_run = shared_client, shared_run
    data = client.get(f"/v1/runs/{finished_run['id']}/importance").json()
    assert data["available"] and data["complete_trials"] == 16 and data["min_trials"] == 10
    assert data["method"] == "optuna PED-ANOVA"
    values = [item["importance"] for item in data["data"]]
    assert values == sorted(values, reverse=True) and math.isclose(sum(values), 1, abs_tol=0.01)
    assert {item["param"] for item in data["data"]} >= {"tile_m", "tile_n", "stages_ab"}
    again = client.get(f"/v1/runs/{finished_run['id']}/importance").json()
    assert again == data  # cached: the same answer


def test_importance_needs_trials_then_falls_back(idle_client: TestClient) -> None:
    client = idle_client
    run = posted_run(client.post("/v1/tune", json=tune_body(trials=40)).json())
    early = client.get(f"/v1/runs/{run['id']}/importance").json()
    assert not early["available"] and "needs 10" in early["reason"]
    # Trials stored without an Optuna study (an imported or pre-study run): the one-way
    # analysis of variance answers. tile_n decides the latency here; raster_swizzle not.
    db = client.app.state.db
    trials = []
    for i in range(24):
        tile_n = (64, 128, 256)[i % 3]
        trials.append({
            "status": "ok", "source": "search", "schedule_hash": f"{i:064x}",
            "choices": {"tile_n": tile_n, "raster_swizzle": (1, 2)[i % 2]},
            "latency_us": 10.0 * tile_n / 64 * (1 + 0.01 * (i % 2)), "predicted_us": None,
            "simulated": True, "error": None, "measurement": None,
        })
    with repo.session_scope(db.sessions) as session:
        repo.add_trials(session, run_id=run["id"], trials=trials)
    data = client.get(f"/v1/runs/{run['id']}/importance").json()
    assert data["available"] and data["method"] == "one-way ANOVA of log latency"
    ranked = {item["param"]: item["importance"] for item in data["data"]}
    assert ranked["tile_n"] > 0.95 > ranked["raster_swizzle"]
    # No best schedule yet: timeline and source say so.
    for url in (f"/v1/runs/{run['id']}/timeline", f"/v1/runs/{run['id']}/source"):
        response = client.get(url)
        assert response.status_code == 404 and "no best schedule yet" in response.json()["detail"]


def test_timeline_and_source(client: TestClient, finished_run: dict) -> None:
    run_id = finished_run["id"]
    best_hash = finished_run["best"]["schedule_hash"]
    timeline = client.get(f"/v1/runs/{run_id}/timeline").json()
    assert timeline["schedule_hash"] == best_hash and timeline["op"] == "gemm"
    assert timeline["device"] == "sim:h200" and timeline["predicted_us"] > 0
    assert timeline["lanes"][:3] == ["tma", "tensor_core", "cuda_core"]
    units = {e["unit"] for e in timeline["entries"]}
    stasks = {e["stask"] for e in timeline["entries"]}
    assert {"tma", "tensor_core"} <= units and {"load_a", "load_b", "mma", "store"} <= stasks
    assert all(e["end_us"] >= e["start_us"] >= 0 for e in timeline["entries"])
    assert set(timeline["mapping"].values()) <= set(timeline["lanes"])

    source = client.get(f"/v1/runs/{run_id}/source")
    # A simulated run stores its winner's rendered kernel too.
    assert source.status_code == 200 and source.headers["x-pipetune-source"] == "stored"
    assert "__global__" in source.text and best_hash in source.text
    kernel_hash = finished_run["best"]["kernel_hash"]
    assert f'filename="{kernel_hash[:16]}.cu"' in source.headers["content-disposition"]

    cached = client.get("/v1/schedules").json()["data"][0]
    assert cached["schedule_hash"] == best_hash
    same = client.get(f"/v1/schedules/{cached['id']}/timeline").json()
    assert same == timeline
    assert client.get(f"/v1/schedules/{cached['id']}/source").text == source.text

    # Without its cache entry (a cancelled run, or one whose entry a faster run replaced)
    # the best schedule is rebuilt from the trial's choices: same hash, same timeline.
    db = client.app.state.db
    with db.engine.begin() as connection:
        connection.execute(text("DELETE FROM pipetune_schedules"))
    rebuilt = client.get(f"/v1/runs/{run_id}/timeline").json()
    assert rebuilt == timeline


def test_schedules_page(shared_client: TestClient, shared_run: dict) -> None:
    client, finished_run = shared_client, shared_run
    cached = client.get("/v1/schedules").json()["data"][0]
    page = client.get("/schedules")
    assert page.status_code == 200
    assert f'href="/schedules/{cached["id"]}"' in page.text
    assert f'href="/runs/{finished_run["id"]}"' in page.text
    assert f'href="/v1/kernels/{cached["kernel_hash"]}/source"' in page.text
    for query, shown in (
        ({"shape": "m=1024"}, True), ({"shape": "1024 fp16"}, True), ({"shape": "m=2048"}, False),
        ({"shape": "bf16"}, False), ({"op": "gemm"}, True), ({"op": "attention"}, False),
        ({"device": "sim:h200"}, True), ({"device": "sim:h100"}, False),
    ):
        html = client.get("/schedules", params=query).text
        assert (f'data-schedule-id="{cached["id"]}"' in html) is shown, query
    detail = client.get(f"/schedules/{cached['id']}")
    assert detail.status_code == 200
    assert cached["schedule_hash"][:16] in detail.text and 'id="timeline"' in detail.text
    assert json.dumps(cached["schedule"]["tile"]["m"]) in detail.text


def test_events_after(shared_client: TestClient, shared_run: dict) -> None:
    client, finished_run = shared_client, shared_run
    run_id = finished_run["id"]
    count = client.get(f"/v1/runs/{run_id}/trials").json()["count"]

    def trial_numbers(**kwargs: object) -> list[int]:
        numbers = []
        with client.stream("GET", f"/v1/runs/{run_id}/events", **kwargs) as response:
            assert response.status_code == 200
            name = None
            for line in response.iter_lines():
                if line.startswith("event: "):
                    name = line[len("event: "):]
                elif line.startswith("data: "):
                    if name == "trial":
                        numbers.append(json.loads(line[len("data: "):])["number"])
                    if name == "end":
                        break
        return numbers

    assert trial_numbers() == list(range(count))
    assert trial_numbers(params={"after": count - 3}) == [count - 2, count - 1]
    assert trial_numbers(headers={"Last-Event-ID": str(count - 2)}) == [count - 1]
    assert trial_numbers(params={"after": count - 1}) == []


def test_active_run_page(idle_client: TestClient) -> None:
    run = posted_run(idle_client.post("/v1/tune", json=tune_body(SMALL_GEMM)).json())
    page = idle_client.get(f"/runs/{run['id']}")
    assert page.status_code == 200 and 'data-status="queued"' in page.text
    assert 'id="cancel-button" class="danger" type="button" >' in page.text
    listed = idle_client.get("/", params={"status": "queued"}).text
    assert f'data-run-id="{run["id"]}"' in listed
