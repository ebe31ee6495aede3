"""The dashboard's login is not an open door (issue 42, item 5): ``next`` stays on this
site, state-changing requests of a browser session carry its CSRF token, the cookie is a
server-side session (not the API key; logout and revoking the key end it), pages carry
security headers that their scripts work under, and failed key attempts are limited per
client address. On SQLite and PostgreSQL; the last test drives Chromium."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from service_helpers import tune_body
from sqlalchemy import inspect, text

from service.auth import issue
from service.core.config import Settings
from service.db import keys as keys_repo
from service.db.repositories import session_scope
from service.main import create_app

SESSION_COOKIE = "pipetune_session"


def _key(client: TestClient, name: str = "browser", *scopes: str) -> tuple[int, str]:
    """A new key's id and token."""
    issued = issue()
    with session_scope(client.app.state.db.sessions) as session:
        key = keys_repo.create_key(session, name=name, scopes=scopes or ("tune",),
                                   issued=issued)
    return key.id, issued.token


def _login_token(client: TestClient) -> str:
    """The login form's CSRF token (``GET /login`` also sets its cookie); empty if the
    form has none (the test that needs one says so)."""
    page = client.get("/login")
    assert page.status_code == 200
    found = re.search(r'data-csrf="([^"]+)"', page.text)
    return found.group(1) if found else ""


def _login(client: TestClient, token: str, next_: str = "/") -> Any:
    return client.post("/login", json={"key": token, "next": next_},
                       headers={"X-CSRF-Token": _login_token(client)})


def _page_csrf(client: TestClient) -> str:
    """The session's CSRF token, as a dashboard page gives it to its scripts; empty if
    the page has none."""
    page = client.get("/", headers={"Accept": "text/html"})
    assert page.status_code == 200, page.text[:300]
    found = re.search(r'<meta name="csrf-token" content="([^"]+)"', page.text)
    return found.group(1) if found else ""


def _sessions(client: TestClient) -> int:
    with session_scope(client.app.state.db.sessions) as session:
        return session.execute(text("SELECT count(*) FROM pipetune_sessions")).scalar_one()


@pytest.fixture
def locked(settings: Settings) -> Iterator[TestClient]:
    """An app that requires keys, whose runs stay queued."""
    with TestClient(create_app(settings.model_copy(update={"require_auth": True}),
                               run_background=False)) as client:
        yield client


# ----- next: a path of this site only ----------------------------------------------------------
OFF_SITE = ["/\\evil.example/", "/%09/evil.example", "/\t/evil.example", "//evil.example",
            "https://evil.example/", "/%2F/evil.example", "/\\/evil.example",
            "javascript:alert(1)", "/\r\n/evil.example", "/%5Cevil.example", "\\\\evil.example"]


@pytest.mark.parametrize("target", OFF_SITE)
def test_next_never_leaves_the_site(locked: TestClient, target: str) -> None:
    page = locked.get("/login", params={"next": target})
    assert 'data-next="/"' in page.text, target
    _, token = _key(locked)
    answer = _login(locked, token, target)
    assert answer.status_code == 200 and answer.json()["next"] == "/"


@pytest.mark.parametrize("raw", ["/login?next=/\\evil.example/", "/login?next=/%09/evil.example",
                                 "/login?next=%2F%2Fevil.example"])
def test_the_audits_links_go_home(locked: TestClient, raw: str) -> None:
    assert 'data-next="/"' in locked.get(raw).text


def test_paths_of_this_site_are_kept(locked: TestClient) -> None:
    _, token = _key(locked)
    assert _login(locked, token, "/runs/3").json()["next"] == "/runs/3"
    assert 'data-next="/schedules?op=gemm"' in locked.get(
        "/login", params={"next": "/schedules?op=gemm"}).text


# ----- the cookie: a server-side session --------------------------------------------------------
def test_the_cookie_is_a_session_not_the_key(locked: TestClient) -> None:
    _, token = _key(locked)
    answer = _login(locked, token)
    assert answer.status_code == 200, answer.text
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{SESSION_COOKIE}=") and token not in cookie
    attributes = cookie.lower()
    assert "httponly" in attributes and "samesite=lax" in attributes
    assert "secure" not in attributes  # plain http: a Secure cookie would not come back
    assert _sessions(locked) == 1
    assert locked.get("/v1/runs").status_code == 200  # the pages' own API calls


def test_over_https_the_cookie_is_secure(settings: Settings) -> None:
    locked_settings = settings.model_copy(update={"require_auth": True})
    with TestClient(create_app(locked_settings, run_background=False),
                    base_url="https://testserver") as client:
        _, token = _key(client)
        assert "secure" in _login(client, token).headers["set-cookie"].lower()


def test_logout_ends_the_session_for_good(locked: TestClient) -> None:
    _, token = _key(locked)
    _login(locked, token)
    stolen = locked.cookies[SESSION_COOKIE]
    csrf = _page_csrf(locked)
    assert locked.post("/logout", headers={"X-CSRF-Token": csrf}).status_code == 200
    assert _sessions(locked) == 0
    locked.cookies.set(SESSION_COOKIE, stolen)  # a copy of the cookie, replayed
    assert locked.get("/v1/runs").status_code == 401


def test_revoking_the_key_ends_its_sessions(locked: TestClient) -> None:
    key_id, token = _key(locked)
    _login(locked, token)
    assert locked.get("/v1/runs").status_code == 200
    with session_scope(locked.app.state.db.sessions) as session:
        keys_repo.revoke_key(session, key_id=key_id)
    assert locked.get("/v1/runs").status_code == 401
    assert _sessions(locked) == 0
    page = locked.get("/", headers={"Accept": "text/html"}, follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"].startswith("/login")


# ----- CSRF ---------------------------------------------------------------------------------------
def test_a_sessions_writes_need_its_csrf_token(locked: TestClient) -> None:
    _, token = _key(locked)
    run = locked.post("/v1/tune", json=tune_body(),
                      headers={"Authorization": f"Bearer {token}"}).json()["run"]
    _login(locked, token)
    csrf = _page_csrf(locked)
    assert csrf, "the page carries no CSRF token"
    for headers in ({}, {"X-CSRF-Token": "not-the-token"}):
        refused = locked.delete(f"/v1/runs/{run['id']}", headers=headers)
        assert refused.status_code == 403, refused.text
        assert refused.json()["detail"][0]["field"] == "x-csrf-token"
    assert locked.post("/logout").status_code == 403
    cancelled = locked.delete(f"/v1/runs/{run['id']}", headers={"X-CSRF-Token": csrf})
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    # A key in the Authorization header is no browser's ambient credential: no token.
    bearer = locked.post(f"/v1/runs/{run['id']}/resume",
                         headers={"Authorization": f"Bearer {token}"})
    assert bearer.status_code == 202


def test_the_login_form_needs_its_csrf_token(locked: TestClient) -> None:
    _, token = _key(locked)
    assert _login_token(locked), "the login form carries no CSRF token"  # and its cookie
    refused = locked.post("/login", json={"key": token, "next": "/"})
    assert refused.status_code == 403
    assert refused.json()["detail"][0]["field"] == "x-csrf-token"
    wrong = locked.post("/login", json={"key": token}, headers={"X-CSRF-Token": "guess"})
    assert wrong.status_code == 403 and _sessions(locked) == 0


# ----- security headers --------------------------------------------------------------------------
def test_pages_carry_security_headers(locked: TestClient) -> None:
    _, token = _key(locked)
    login_page = locked.get("/login")
    _login(locked, token)
    for page in (login_page, locked.get("/", headers={"Accept": "text/html"}),
                 locked.get("/runs/999", headers={"Accept": "text/html"})):
        policy = page.headers["content-security-policy"]
        script_src = re.search(r"script-src ([^;]*)", policy)
        assert script_src and script_src.group(1).strip() == "'self'", policy
        assert "frame-ancestors 'none'" in policy and "object-src 'none'" in policy
        assert page.headers["x-frame-options"] == "DENY"
        assert page.headers["referrer-policy"] == "same-origin"
        assert page.headers["x-content-type-options"] == "nosniff"
        # What script-src 'self' would block: inline scripts and handlers.
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", page.text), page.url
        assert not re.search(r"\son[a-z]+\s*=", page.text), page.url
    assert locked.get("/v1/runs").headers["x-content-type-options"] == "nosniff"


# ----- failed attempts --------------------------------------------------------------------------
def test_failed_key_attempts_are_limited_per_address(settings: Settings) -> None:
    limited = settings.model_copy(update={"require_auth": True,
                                          "auth_failure_limit": "3/minute"})
    with TestClient(create_app(limited, run_background=False)) as client:
        _, token = _key(client, "calm", "read")
        bad = {"Authorization": "Bearer ptk_000000000000_wrong"}
        assert [client.get("/v1/runs", headers=bad).status_code for _ in range(3)] == [401] * 3
        over = client.get("/v1/runs", headers=bad)
        assert over.status_code == 429 and 1 <= int(over.headers["Retry-After"]) <= 60
        assert over.json()["detail"][0]["field"] == "auth_failure_limit"
        login = client.post("/login", json={"key": "ptk_x_y"},
                            headers={"X-CSRF-Token": _login_token(client)})
        assert login.status_code == 429 and "Retry-After" in login.headers
        elsewhere = TestClient(client.app, client=("192.0.2.7", 50000))
        good = elsewhere.get("/v1/runs", headers={"Authorization": f"Bearer {token}"})
        assert good.status_code == 200  # another address is not held back


def test_failed_logins_are_limited(settings: Settings) -> None:
    limited = settings.model_copy(update={"require_auth": True,
                                          "auth_failure_limit": "2/minute"})
    with TestClient(create_app(limited, run_background=False)) as client:
        answers = [client.post("/login", json={"key": "ptk_x_y"},
                               headers={"X-CSRF-Token": _login_token(client)})
                   for _ in range(3)]
        assert [a.status_code for a in answers] == [401, 401, 429]
        assert int(answers[-1].headers["Retry-After"]) >= 1
        assert answers[-1].json()["detail"][0]["field"] == "auth_failure_limit"


# ----- the sessions table ----------------------------------------------------------------------
def test_0008_adds_the_sessions_table_and_downgrades_keeping_the_keys(
        database_url: str) -> None:
    """A database at 0007 with a key: 0008 adds ``pipetune_sessions`` (a login works on
    it), and the downgrade drops it and keeps the key."""
    import migrations
    from service.core.db import Database
    from service.db import sessions as sessions_repo

    database = Database(database_url)
    try:
        migrations.upgrade(database.url, "0007", engine=database.engine)
        issued = issue()
        with session_scope(database.sessions) as session:
            key_id = keys_repo.create_key(session, name="old", scopes=["read"],
                                          issued=issued).id
        migrations.upgrade(database.url, "0008", engine=database.engine)
        with session_scope(database.sessions) as session:
            secret, _ = sessions_repo.create_session(session, key_id=key_id, ttl_s=60)
        with session_scope(database.sessions) as session:
            found = sessions_repo.find_session(session, secret=secret)
            assert found is not None and found[1].name == "old"
        migrations.downgrade(database.url, "0007", engine=database.engine)
        with database.engine.connect() as connection:
            assert "pipetune_sessions" not in inspect(connection).get_table_names()
        with session_scope(database.sessions) as session:
            assert keys_repo.authenticate(session, token=issued.token) is not None
    finally:
        database.dispose()


# ----- in a browser ------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_browser_logs_in_cancels_and_logs_out(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Chromium under the pages' CSP (no ``bypass_csp``): the login form, the run page
    with its charts, its cancel button (a write with the session's CSRF token), the runs
    list's refresh and logout work, with no script error or CSP violation."""
    from test_browser import (
        CHROMIUM,
        CHROMIUM_ARGS,
        _browser_problem,
        _console_error,
        _in_ci,
        _live_server,
    )

    problem = _browser_problem()
    if problem is not None:
        if _in_ci():
            pytest.fail(f"the browser test must run in CI: {problem}")
        pytest.skip(problem)
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("PIPETUNE_REQUIRE_AUTH", "true")
    with _live_server(tmp_path) as api, sync_playwright() as playwright:
        token = _key_on_file(tmp_path / "dashboard.db")
        started = api.post("/v1/tune", json=tune_body(trials=10_000),
                           headers={"Authorization": f"Bearer {token}"})
        assert started.status_code == 202, started.text
        run_id = started.json()["run"]["id"]
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
            page.on("console", lambda message: errors.append(_console_error(message))
                    if message.type == "error" else None)
            base = str(api.base_url).rstrip("/")
            page.goto(f"{base}/runs/{run_id}")
            assert page.url == f"{base}/login?next=%2Fruns%2F{run_id}"
            page.fill("input[name=key]", "ptk_000000000000_wrong")
            page.click("button[type=submit]")
            page.wait_for_selector("#login-error", state="visible")
            assert [e for e in errors if "401" not in e] == []  # the refused login's 401
            errors.clear()
            page.fill("input[name=key]", token)
            page.click("button[type=submit]")
            page.wait_for_url(f"{base}/runs/{run_id}")
            page.wait_for_selector("body[data-ready=true]")
            page.on("dialog", lambda dialog: dialog.accept())
            page.click("#cancel-button")
            page.locator("#run-status", has_text="cancelled").wait_for()
            page.goto(f"{base}/")
            page.wait_for_selector("#runs-table[data-refreshed]")  # runs.js refreshed it
            assert errors == []
            page.click("#logout")
            page.wait_for_url(f"{base}/login")
            # A refresh racing the logout may be refused (401); nothing else may fail.
            assert [e for e in errors if "401" not in e] == []
            cookies = {c["name"]: c["value"] for c in page.context.cookies()}
            assert SESSION_COOKIE not in cookies
        finally:
            browser.close()


def _key_on_file(database: Path) -> str:
    """A new ``tune`` key's token, made in the SQLite file a live server uses."""
    from sqlalchemy import create_engine
    from sqlalchemy.orm import sessionmaker

    engine = create_engine(f"sqlite:///{database}")
    try:
        issued = issue()
        with session_scope(sessionmaker(engine)) as session:
            keys_repo.create_key(session, name="browser", scopes=["tune"], issued=issued)
        return issued.token
    finally:
        engine.dispose()
