"""The dashboard in headless Chromium against a live ``pipetune serve`` (simulated device).

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
from service_helpers import SMALL_GEMM, tune_body

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
TIMEOUT_MS = 120_000
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts" / "dashboard"


@dataclass
class Browsing:
    """A Chromium page on the live server, the server's API, and the page's script errors."""

    page: Any
    api: httpx.Client
    base: str
    errors: list[str]


def _in_ci() -> bool:
    return bool(os.environ.get("CI")) or "PIPETUNE_TEST_POSTGRES_URL" in os.environ


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
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(TIMEOUT_MS)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
            page.on("console", lambda message: errors.append(f"console: {message.text}")
                    if message.type == "error" else None)
            yield Browsing(page, api, str(api.base_url).rstrip("/"), errors)
        finally:
            browser.close()


def _shot(page: Any, name: str, selector: str | None = None) -> None:
    target = page.locator(selector) if selector else page
    kwargs = {} if selector else {"full_page": True}
    target.screenshot(path=str(ARTIFACTS / f"{name}.png"), **kwargs)


def test_run_appears_finishes_and_explains_itself(browsing: Browsing) -> None:
    page, api, base, errors = browsing.page, browsing.api, browsing.base, browsing.errors
    page.goto(f"{base}/")
    assert "No runs" in page.inner_text("#runs-table")

    # A run started through the API shows up in the open list and finishes there.
    response = api.post("/v1/tune", json=tune_body(SMALL_GEMM, trials=32))
    assert response.status_code == 202, response.text
    run_id = response.json()["run"]["id"]
    row = f'tr[data-run-id="{run_id}"]'
    page.wait_for_selector(row)
    page.wait_for_selector(f'{row}[data-status="succeeded"]')
    assert "m=1024 n=1024 k=1024" in page.inner_text(row)
    assert "32/32" in page.inner_text(row) and "µs" in page.inner_text(row)
    _shot(page, "runs-list")

    # The filters narrow the list (a full page load each).
    page.select_option('select[name="op"]', "attention")
    page.wait_for_url("**op=attention**")
    assert page.locator(row).count() == 0
    page.goto(f"{base}/?status=succeeded&device=sim:h200")
    page.wait_for_selector(row)

    # The run page: convergence charts, the winning schedule's timeline, its source.
    page.click(f'{row} a[href="/runs/{run_id}"]')
    page.wait_for_url(f"**/runs/{run_id}")
    page.wait_for_selector("body[data-ready=true]")
    page.wait_for_selector("#chart-trials[data-drawn=true] .main-svg")
    page.wait_for_selector("#chart-time[data-drawn=true] .main-svg")
    assert page.locator("#chart-trials .scatterlayer .trace").count() >= 2  # trials + best
    assert page.locator("#chart-trials .scatterlayer .point").count() >= 32
    page.wait_for_selector("#timeline[data-drawn=true] .main-svg")
    timeline_text = page.inner_text("#timeline")
    for lane in ("TMA", "Tensor cores", "CUDA cores"):
        assert lane in timeline_text
    assert page.locator("#timeline .barlayer .point").count() >= 8
    for stask in ("load_a", "load_b", "mma", "store"):
        assert stask in timeline_text
    assert "predicted" in page.inner_text("#timeline-summary")
    page.wait_for_function(
        "document.querySelector('#kernel-source').textContent.includes('__global__')"
    )
    # A simulated run stores its winner's rendered kernel; the page shows that artifact.
    assert "the stored kernel" in page.inner_text("#source-origin")
    assert page.get_attribute("#download-source", "download").endswith(".cu")
    page.wait_for_selector("#importance[data-drawn=true] .main-svg")
    assert page.locator("#trials-table tbody tr").count() == 50
    assert page.is_hidden("#cancel-button")
    _shot(page, "run-page")
    _shot(page, "run-timeline", "#timeline")
    _shot(page, "run-convergence", ".charts")

    # Sorting the trials table by latency puts the best trial first.
    best = api.get(f"/v1/runs/{run_id}").json()["best"]["latency_us"]
    page.click('#trials-table th[data-sort="latency_us"]')
    page.wait_for_selector('#trials-table th[data-sort="latency_us"].asc')
    page.wait_for_function(
        "document.querySelector('#trials-table tbody tr td:nth-child(2)')"
        ".textContent.trim() === 'ok'"
    )
    first_latency = page.inner_text("#trials-table tbody tr td:nth-child(4)")
    assert first_latency == f"{best:.2f} µs"

    # The schedules page: searchable, each entry links to its schedule and kernel.
    page.goto(f"{base}/schedules")
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
    _shot(page, "schedule-page")
    page.goto(f"{base}/schedules?shape=m%3D2048")
    assert page.locator("tr.schedule-row").count() == 0
    assert not errors, errors


def test_live_progress_and_cancel(browsing: Browsing) -> None:
    page, api, base, errors = browsing.page, browsing.api, browsing.base, browsing.errors
    response = api.post(
        "/v1/tune",
        json=tune_body({"m": 2048, "n": 2048, "k": 2048, "dtype": "float16"}, trials=5000),
    )
    assert response.status_code == 202, response.text
    run_id = response.json()["run"]["id"]
    page.goto(f"{base}/runs/{run_id}")
    page.wait_for_selector("#run-page[data-live=true]")
    # Progress arrives over server-sent events, without reloading the page.
    page.wait_for_function("Number(document.querySelector('#trials-done').textContent) >= 8")
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
