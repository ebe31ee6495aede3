"""API keys: 401 / 403 / 429 answers, run ownership, quotas, the CLI that makes keys,
the dashboard's key, and loopback use without keys (issue 16, item 2)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from service_helpers import SMALL_GEMM, tune_body

from service.auth import issue
from service.cli import main as cli
from service.commands.serve import is_loopback
from service.core.config import Settings
from service.db import keys as keys_repo
from service.db.repositories import session_scope
from service.main import create_app


def _key(client: TestClient, name: str, *scopes: str) -> tuple[int, dict[str, str]]:
    """A new key's id and the header that presents it."""
    issued = issue()
    with session_scope(client.app.state.db.sessions) as session:
        key = keys_repo.create_key(session, name=name, scopes=scopes, issued=issued)
    return key.id, {"Authorization": f"Bearer {issued.token}"}


def _gemm(m: int) -> dict:
    return tune_body({**SMALL_GEMM, "m": m})


@pytest.fixture
def locked(settings: Settings) -> Iterator[TestClient]:
    """An app that requires keys, whose runs stay queued."""
    locked_settings = settings.model_copy(update={"require_auth": True})
    with TestClient(create_app(locked_settings, run_background=False)) as client:
        yield client


def test_missing_or_invalid_key_is_401_naming_the_header(locked: TestClient) -> None:
    key_id, header = _key(locked, "ci", "read")
    for headers in ({}, {"Authorization": "Bearer ptk_nope_nope"},
                    {"Authorization": "Basic abc"}):
        answer = locked.get("/v1/runs", headers=headers)
        assert answer.status_code == 401
        assert answer.headers["WWW-Authenticate"].startswith("Bearer")
        assert answer.json()["detail"][0]["field"] == "authorization"
    assert locked.get("/v1/runs", headers=header).status_code == 200
    assert locked.get("/healthz").status_code == 200  # liveness stays open
    with session_scope(locked.app.state.db.sessions) as session:
        keys_repo.revoke_key(session, key_id=key_id)
    assert locked.get("/v1/runs", headers=header).status_code == 401


def test_scopes_and_ownership(locked: TestClient) -> None:
    _, reader = _key(locked, "reader", "read")
    owner_id, owner = _key(locked, "owner", "tune")
    _, other = _key(locked, "other", "tune")
    _, admin = _key(locked, "admin", "admin")
    refused = locked.post("/v1/tune", json=_gemm(1024), headers=reader)
    assert refused.status_code == 403 and "'tune' scope" in refused.json()["detail"][0]["msg"]
    run = locked.post("/v1/tune", json=_gemm(1024), headers=owner).json()["run"]
    assert run["key_id"] == owner_id
    assert locked.get(f"/v1/runs/{run['id']}", headers=reader).status_code == 200
    assert locked.delete(f"/v1/runs/{run['id']}", headers=other).status_code == 403
    assert locked.delete(f"/v1/runs/{run['id']}", headers=reader).status_code == 403
    assert locked.post(f"/v1/runs/{run['id']}/resume", headers=other).status_code == 403
    cancelled = locked.delete(f"/v1/runs/{run['id']}", headers=owner)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    resumed = locked.post(f"/v1/runs/{run['id']}/resume", headers=admin)
    assert resumed.status_code == 202 and resumed.json()["status"] == "queued"
    assert locked.delete(f"/v1/runs/{run['id']}", headers=admin).status_code == 200


def test_queue_quotas_are_429_with_retry_after(settings: Settings) -> None:
    bounded = settings.model_copy(update={"key_max_active_runs": 2, "max_queued_runs": 3})
    with TestClient(create_app(bounded, run_background=False)) as client:
        _, first = _key(client, "first", "tune")
        _, second = _key(client, "second", "tune")
        for m in (256, 512):
            assert client.post("/v1/tune", json=_gemm(m), headers=first).status_code == 202
        # Joining a run already queued adds none, so it is not refused.
        assert client.post("/v1/tune", json=_gemm(256), headers=first).status_code == 202
        over = client.post("/v1/tune", json=_gemm(768), headers=first)
        assert over.status_code == 429 and int(over.headers["Retry-After"]) > 0
        assert over.json()["detail"][0]["field"] == "key_max_active_runs"
        assert client.post("/v1/tune", json=_gemm(768), headers=second).status_code == 202
        full = client.post("/v1/tune", json=_gemm(1280), headers=second)
        assert full.status_code == 429 and full.json()["detail"][0]["field"] == "max_queued_runs"
        full = client.post("/v1/tune", json=_gemm(1280))  # anonymous loopback use too
        assert full.status_code == 429


def test_rate_limit_per_key(settings: Settings) -> None:
    limited = settings.model_copy(update={"rate_limit": "3/minute"})
    with TestClient(create_app(limited, run_background=False)) as client:
        _, header = _key(client, "busy", "read")
        _, calm = _key(client, "calm", "read")
        assert [client.get("/v1/runs", headers=header).status_code for _ in range(3)] == [200] * 3
        over = client.get("/v1/runs", headers=header)
        assert over.status_code == 429 and 1 <= int(over.headers["Retry-After"]) <= 60
        assert over.json()["detail"][0]["field"] == "rate_limit"
        assert client.get("/v1/runs", headers=calm).status_code == 200
        assert client.get("/v1/runs").status_code == 200  # no key on loopback: no limit


def test_loopback_without_keys_works_as_before_and_a_key_still_owns(
        idle_client: TestClient) -> None:
    run = idle_client.post("/v1/tune", json=_gemm(1024))
    assert run.status_code == 202 and run.json()["run"]["key_id"] is None
    key_id, header = _key(idle_client, "mine", "tune")
    keyed = idle_client.post("/v1/tune", json=_gemm(2048), headers=header).json()["run"]
    assert keyed["key_id"] == key_id
    bad = idle_client.get("/v1/runs", headers={"Authorization": "Bearer wrong"})
    assert bad.status_code == 401  # a key given is checked even where none is needed
    assert idle_client.delete(f"/v1/runs/{keyed['id']}").status_code == 200  # local admin


def test_keys_cli_creates_lists_and_revokes(database_url: str, tmp_path, capsys) -> None:
    assert cli(["keys", "create", "laptop", "--scope", "read", "--scope", "tune",
                "--database-url", database_url]) == 0
    token = capsys.readouterr().out.strip()
    assert token.startswith("ptk_")
    assert cli(["keys", "list", "--json", "--database-url", database_url]) == 0
    listed = capsys.readouterr().out
    assert '"laptop"' in listed and token not in listed and '"tune"' in listed
    settings = Settings(database_url=database_url, data_dir=tmp_path, require_auth=True)
    with TestClient(create_app(settings, run_background=False)) as client:
        header = {"Authorization": f"Bearer {token}"}
        assert client.get("/v1/runs", headers=header).status_code == 200
        assert cli(["keys", "revoke", "1", "--database-url", database_url]) == 0
        assert client.get("/v1/runs", headers=header).status_code == 401
    assert cli(["keys", "revoke", "99", "--database-url", database_url]) == 1


def test_dashboard_asks_for_a_key_and_opens_a_session(locked: TestClient) -> None:
    """The cookie details (a server-side session, CSRF, next) are in
    tests/dashboard/test_dashboard_security.py."""
    _, header = _key(locked, "browser", "read")
    page = locked.get("/", headers={"Accept": "text/html"}, follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"] == "/login?next=%2F"
    form = locked.get("/login")
    assert form.status_code == 200
    csrf = {"X-CSRF-Token": form.text.split('data-csrf="', 1)[1].split('"', 1)[0]}
    wrong = locked.post("/login", json={"key": "ptk_x_y", "next": "/"}, headers=csrf)
    assert wrong.status_code == 401 and wrong.json()["detail"][0]["field"] == "key"
    token = header["Authorization"].split()[1]
    login = locked.post("/login", json={"key": token, "next": "//evil.example"}, headers=csrf)
    assert login.status_code == 200 and login.json()["next"] == "/"
    assert "httponly" in login.headers["set-cookie"].lower()
    assert token not in login.headers["set-cookie"]
    assert locked.get("/", headers={"Accept": "text/html"}).status_code == 200
    assert locked.get("/v1/runs").status_code == 200  # the dashboard's own API calls


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("::1", True), ("localhost", True), ("0.0.0.0", False),
    ("::", False), ("192.168.1.5", False), ("example.com", False)])
def test_serve_requires_keys_off_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_client_sends_the_key_from_its_argument_or_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import pipetune

    monkeypatch.setenv("PIPETUNE_API_KEY", "ptk_env_secret")
    with pipetune.Client() as client:
        assert client._http.headers["Authorization"] == "Bearer ptk_env_secret"
    with pipetune.Client(api_key="ptk_arg_secret") as client:
        assert client._http.headers["Authorization"] == "Bearer ptk_arg_secret"
    monkeypatch.delenv("PIPETUNE_API_KEY")
    with pipetune.Client() as client:
        assert "Authorization" not in client._http.headers
