"""The dashboard in headless Chromium against a live ``pipetune serve`` (simulated device),
in a 1400 px wide window.

Debian's ``chromium`` is driven by Playwright's Python package (never a browser that
Playwright downloads). Without chromium or Playwright the test is skipped on a developer's
machine and fails in CI (``CI`` or ``PIPETUNE_TEST_POSTGRES_URL`` set, as ``.ci/run``
does). Screenshots are kept in ``tests/artifacts/dashboard/``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from dashboard_helpers import posted_run
from service_helpers import SMALL_GEMM, tune_body
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

from service.db import repositories as repo

pytestmark = pytest.mark.slow  # a live server and headless Chromium: seconds a test

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
TIMEOUT_MS = 120_000
#: The window the tables must fit in.
WIDTH = 1400
CHUNK_SCAN = {"batch": 1, "seqlen": 1024, "nheads": 8, "headdim": 64, "dstate": 128,
              "ngroups": 1, "chunk_size": 256, "dtype": "float16"}
ATTENTION = {"batch": 1, "heads": 16, "kv_heads": 8, "seq_q": 2048, "seq_kv": 2048,
             "head_dim": 128, "causal": True, "dtype": "bfloat16"}
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts" / "dashboard"


@dataclass
class Browsing:
    """A Chromium page on the live server, the server's API, its SQLite file, and the
    page's script errors."""

    page: Any
    api: httpx.Client
    base: str
    database: Path
    errors: list[str]


def _in_ci() -> bool:
    return bool(os.environ.get("CI")) or "PIPETUNE_TEST_POSTGRES_URL" in os.environ


def _console_error(message) -> str:
    """A console error with where it came from (a failed request names its URL)."""
    return f"console: {message.text} ({message.location.get('url')})"


def _browser_problem() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        return f"Playwright is not installed ({exc}); pip install -e '.[dev]'"
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing; apt-get install chromium"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def _live_server(tmp_path: Path) -> Iterator[httpx.Client]:
    """``pipetune serve`` on a free port and a temporary SQLite file, until the block ends."""
    port = _free_port()
    log_path = tmp_path / "server.log"
    env = {**os.environ, "PIPETUNE_DATA_DIR": str(tmp_path)}
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve", "--port", str(port),
             "--database-url", f"sqlite:///{tmp_path / 'dashboard.db'}",
             "--log-level", "warning"],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if client.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if process.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    raise AssertionError(log_path.read_text())
                time.sleep(0.2)
            yield client
        finally:
            client.close()
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def browsing(tmp_path: Path) -> Iterator[Browsing]:
    """Chromium on a live server (skipped without chromium, except in CI)."""
    problem = _browser_problem()
    if problem is not None:
        if _in_ci():
            pytest.fail(f"the browser test must run in CI: {problem}")
        pytest.skip(problem)
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with _live_server(tmp_path) as api, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            # wait_for_function evaluates its predicate with eval(), which the pages'
            # Content-Security-Policy forbids; the policy itself is driven through
            # Chromium in test_dashboard_security.py.
            page = browser.new_page(viewport={"width": WIDTH, "height": 1000}, bypass_csp=True)
            page.set_default_timeout(TIMEOUT_MS)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
            page.on("console", lambda message: errors.append(_console_error(message))
                    if message.type == "error" else None)
            yield Browsing(page, api, str(api.base_url).rstrip("/"), tmp_path / "dashboard.db",
                           errors)
        finally:
            browser.close()


def _shot(page: Any, name: str, selector: str | None = None) -> None:
    target = page.locator(selector) if selector else page
    kwargs = {} if selector else {"full_page": True}
    target.screenshot(path=str(ARTIFACTS / f"{name}.png"), **kwargs)


def _start(api: httpx.Client, body: dict[str, Any]) -> int:
    response = api.post("/v1/tune", json=body)
    assert response.status_code == 202, response.text
    return posted_run(response.json())["id"]


def _finish(api: httpx.Client, run_id: int) -> dict[str, Any]:
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while (run := api.get(f"/v1/runs/{run_id}").json())["status"] in ("queued", "running"):
        assert time.monotonic() < deadline, run
        time.sleep(0.2)
    assert run["status"] == "succeeded", run
    return run


def _assert_tables_fit(page: Any) -> None:
    """Every table is as wide as its box at most, and the page does not scroll sideways."""
    widths = page.eval_on_selector_all(
        ".table-wrap", "boxes => boxes.map(b => [b.scrollWidth, b.clientWidth])"
    )
    assert widths and all(scroll <= client for scroll, client in widths), widths
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH


def _add_invalid_trials(database: Path, run_id: int, count: int) -> None:
    """What an older simulated run stored: points rejected before measuring, as trials."""
    engine = create_engine(f"sqlite:///{database}")
    try:
        with repo.session_scope(sessionmaker(engine)) as session:
            repo.add_trials(session, run_id=run_id, trials=[{
                "status": "invalid", "source": "search", "schedule_hash": None,
                "choices": {"tile_m": 512, "tile_n": 512}, "latency_us": None,
                "predicted_us": None, "simulated": True, "measurement": None,
                "error": "smem_exceeded: the stages need more shared memory than an SM has",
            } for _ in range(count)])
    finally:
        engine.dispose()


def _timeline_places(page: Any) -> list[str]:
    """Each timeline bar's label and its hover text (where in the block it runs)."""
    return page.evaluate(
        "document.getElementById('timeline').data.filter(t => t.type === 'bar')"
        ".flatMap(t => [...t.text, ...t.customdata.map(c => c[1])])"
    )


def test_run_appears_finishes_and_explains_itself(browsing: Browsing) -> None:
    page, api, base, errors = browsing.page, browsing.api, browsing.base, browsing.errors
    page.goto(f"{base}/")
    assert "No runs" in page.inner_text("#runs-table")

    # A run started through the API shows up in the open list and finishes there.
    run_id = _start(api, tune_body(SMALL_GEMM, trials=32))
    row = f'tr[data-run-id="{run_id}"]'
    page.wait_for_selector(row)
    page.wait_for_selector(f'{row}[data-status="succeeded"]')
    listed = page.inner_text(row)
    assert "m=1024 n=1024 k=1024" in listed and "32/32" in listed and "µs" in listed
    # A simulated latency is labelled the cost model's estimate; no run here has a
    # baseline (none ran on a GPU), so there is no column of dashes for one.
    assert page.locator(f"{row} abbr.est").count() == 1
    assert "not a measurement" in page.get_attribute(f"{row} abbr.est", "title")
    assert page.locator("#runs-table th.baseline-col").count() == 0
    assert "vs baseline" not in page.inner_text("#runs-table")

    # The filters narrow the list (a full page load each).
    page.select_option('select[name="op"]', "attention")
    page.wait_for_url("**op=attention**")
    assert page.locator(row).count() == 0
    page.goto(f"{base}/?status=succeeded&device=sim:h200")
    page.wait_for_selector(row)

    # The other operators' long shapes still fit the tables of a 1400 px window.
    scan_id = _start(api, {**tune_body(CHUNK_SCAN, trials=8), "op": "mamba2_chunk_scan"})
    attention_id = _start(api, {**tune_body(ATTENTION, trials=8), "op": "attention"})
    _finish(api, scan_id), _finish(api, attention_id)
    page.goto(f"{base}/")
    page.wait_for_selector(f'tr[data-run-id="{attention_id}"][data-status="succeeded"]')
    _assert_tables_fit(page)
    _shot(page, "runs-list")

    # An older run's invalid points (stored as trials) are hidden until asked for.
    _add_invalid_trials(browsing.database, run_id, 5)
    series = api.get(f"/v1/runs/{run_id}/convergence").json()
    total, invalid = series["count"], series["statuses"]["invalid"]
    visible = total - invalid

    # The run page: placeholders hold the charts' places until plotly.js (held back here)
    # has drawn them; the trials table does not wait for it.
    held: list[Any] = []
    page.route("**/static/vendor/plotly.min.js", lambda route: held.append(route))
    page.goto(f"{base}/runs/{run_id}", wait_until="domcontentloaded")
    for chart in ("#chart-trials", "#chart-time", "#timeline"):
        assert page.is_visible(f"{chart} .chart-placeholder"), chart
    page.wait_for_selector("#trials-table tbody tr[data-number]")
    while not held:
        page.wait_for_timeout(20)
    assert page.get_attribute("#chart-trials", "data-drawn") is None
    assert page.is_visible("#chart-trials .chart-placeholder")
    _shot(page, "run-page-loading")
    held[0].continue_()
    page.wait_for_selector("body[data-ready=true]")
    page.wait_for_selector("#chart-trials[data-drawn=true] .main-svg")
    page.wait_for_selector("#chart-time[data-drawn=true] .main-svg")
    page.wait_for_selector("#timeline[data-drawn=true] .main-svg")
    assert page.locator(".chart-placeholder").count() == 0
    page.unroute("**/static/vendor/plotly.min.js")

    # Convergence: every valid trial a point, the best so far a line; no invalid point.
    assert page.locator("#chart-trials .scatterlayer .trace").count() >= 2
    assert page.locator("#chart-trials .scatterlayer .point").count() == visible
    assert "estimated latency" in page.inner_text("#chart-trials")
    assert page.locator("#trials-table tbody tr").count() == min(50, visible)
    assert page.locator("#trials-table .status-invalid").count() == 0
    assert f"({invalid} invalid hidden)" in page.inner_text("#trials-count")
    assert page.locator("#trials-table tbody abbr.est").count() == min(50, visible)
    assert page.locator("#best-latency + abbr.est").count() == 1
    assert page.is_visible("#estimate-card") and page.locator("#baseline-card").count() == 0
    _assert_tables_fit(page)

    # The timeline, with the GEMM's own caption.
    timeline_text = page.inner_text("#timeline")
    for lane in ("TMA", "Tensor cores", "CUDA cores"):
        assert lane in timeline_text
    assert page.locator("#timeline .barlayer .point").count() >= 8
    for stask in ("load_a", "load_b", "mma", "store"):
        assert stask in timeline_text
    assert "store: epilogue, once after the loop" not in timeline_text
    assert "epilogue: once, after the loop" in _timeline_places(page)
    assert "load_a, load_b" in page.inner_text("#timeline-caption")
    assert "predicted" in page.inner_text("#timeline-summary")
    page.wait_for_function(
        "document.querySelector('#kernel-source').textContent.includes('__global__')"
    )
    # A simulated run stores its winner's rendered kernel; the page shows that artifact.
    assert "the stored kernel" in page.inner_text("#source-origin")
    assert page.get_attribute("#download-source", "download").endswith(".cu")
    page.wait_for_selector("#importance[data-drawn=true] .main-svg")
    assert page.is_hidden("#cancel-button")
    _shot(page, "run-page")
    _shot(page, "run-timeline", "#timeline")
    _shot(page, "run-convergence", ".charts")

    # The toggle shows the invalid points, in the chart and the table.
    page.check(".show-invalid >> nth=0")
    page.wait_for_function(
        f"document.querySelectorAll('#chart-trials .scatterlayer .point').length === {total}"
    )
    page.wait_for_selector("#trials-table .status-invalid")
    assert page.is_checked(".show-invalid >> nth=1")
    _shot(page, "run-page-invalid-shown", ".charts")
    page.uncheck(".show-invalid >> nth=1")
    page.wait_for_function(
        f"document.querySelectorAll('#chart-trials .scatterlayer .point').length === {visible}"
    )

    # Sorting the trials table by latency puts the best trial first.
    best = api.get(f"/v1/runs/{run_id}").json()["best"]["latency_us"]
    page.click('#trials-table th[data-sort="latency_us"]')
    page.wait_for_selector('#trials-table th[data-sort="latency_us"].asc')
    page.wait_for_function(
        "document.querySelector('#trials-table tbody tr td:nth-child(2)')"
        ".textContent.trim() === 'ok'"
    )
    first_latency = page.inner_text("#trials-table tbody tr td:nth-child(4)")
    assert first_latency.startswith(f"{best:.2f} µs")

    # A Mamba2 run's page says Mamba2's words, and its prologue reads as one, not [-1].
    page.goto(f"{base}/runs/{scan_id}")
    page.wait_for_selector("#timeline[data-drawn=true] .main-svg")
    assert "Mamba2 chunk scan" in page.inner_text("h1")
    caption = page.inner_text("#timeline-caption")
    assert "mma_x" in caption and "load_a" not in caption and "wgmma" not in caption
    places = _timeline_places(page)
    assert "prologue: once, before the loop" in places
    assert not [p for p in places if "[-1]" in p or "iteration -1" in p]
    assert any(p.startswith("load_c (prologue)") for p in places)
    _shot(page, "run-timeline-mamba2", "#timeline")
    page.goto(f"{base}/runs/{attention_id}")
    page.wait_for_selector("#timeline[data-drawn=true] .main-svg")
    caption = page.inner_text("#timeline-caption")
    assert "mma_qk" in caption and "load_a" not in caption

    # The schedules page: searchable, each entry links to its schedule and kernel.
    page.goto(f"{base}/schedules")
    assert page.locator("tr.schedule-row").count() == 3
    assert page.locator("#schedules-filters ~ .table-wrap th.baseline-col").count() == 0
    assert page.locator("tr.schedule-row abbr.est").count() == 3
    _assert_tables_fit(page)
    page.fill('input[name="shape"]', "m=1024 fp16")
    page.click('#schedules-filters button[type="submit"]')
    page.wait_for_url("**shape=**")
    entry = page.locator("tr.schedule-row")
    assert entry.count() == 1 and f"#{run_id}" in entry.inner_text()
    _shot(page, "schedules")
    page.click("tr.schedule-row a.hash")
    page.wait_for_selector("body[data-ready=true]")
    page.wait_for_selector("#timeline[data-drawn=true] .main-svg")
    page.wait_for_function(
        "document.querySelector('#kernel-source').textContent.includes('__global__')"
    )
    assert page.is_visible("#estimate-card") and page.locator("#baseline-card").count() == 0
    assert "load_a, load_b" in page.inner_text("#timeline-caption")
    _shot(page, "schedule-page")
    page.goto(f"{base}/schedules?shape=m%3D2048")
    assert page.locator("tr.schedule-row").count() == 0
    assert not errors, errors


def test_live_progress_by_time_and_cancel(browsing: Browsing) -> None:
    page, api, base, errors = browsing.page, browsing.api, browsing.base, browsing.errors
    # A budget of seconds alone: progress is time, never "N/10000 trials".
    body = tune_body({"m": 2048, "n": 2048, "k": 2048, "dtype": "float16"})
    run_id = _start(api, {**body, "budget": {"seconds": 600}})
    page.goto(f"{base}/")
    row = f'tr[data-run-id="{run_id}"]'
    page.wait_for_function(
        f"document.querySelector('{row} .progress-text')?.textContent.includes('trials ·')"
    )
    listed = page.inner_text(f"{row} .progress-text")
    assert listed.endswith("/ 10 min 00 s") and "10000" not in listed, listed

    page.goto(f"{base}/runs/{run_id}")
    page.wait_for_selector("#run-page[data-live=true]")
    # Progress arrives over server-sent events, without reloading the page.
    page.wait_for_function("Number(document.querySelector('#trials-done').textContent) >= 8")
    progress = page.inner_text("#progress-text")
    assert "of 10 min 00 s" in progress and "10000" not in progress, progress
    # The bar and the clock move with time.
    elapsed = page.inner_text("#elapsed")
    page.wait_for_function(f"document.querySelector('#elapsed').textContent !== '{elapsed}'")
    assert float(page.get_attribute("#progress-bar", "style").split(":")[1].rstrip("%; ")) > 0
    page.wait_for_selector("#chart-trials[data-drawn=true] .main-svg")
    page.wait_for_function(
        "document.querySelectorAll('#chart-trials .scatterlayer .point').length >= 8"
    )
    page.wait_for_selector("#timeline[data-drawn=true] .main-svg")
    assert page.inner_text("#run-status") == "running"
    _shot(page, "run-live")

    page.on("dialog", lambda dialog: dialog.accept())
    page.click("#cancel-button")
    page.wait_for_selector("body[data-run-ended=true]")
    assert page.inner_text("#run-status") == "cancelled"
    assert page.is_hidden("#cancel-button")
    assert api.get(f"/v1/runs/{run_id}").json()["status"] == "cancelled"
    _shot(page, "run-cancelled")
    assert not errors, errors
