"""No request header can freeze the server (issue 42, item 3): a request whose headers
are too large or too many is answered 431 by the HTTP protocol ``serve`` runs, on either
parser (httptools and h11), before the headers are buffered whole; ordinary requests and
``/healthz`` are not affected. Against the real app on a loopback port."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from service_helpers import service_settings

from service.core.config import Settings
from service.main import create_app

#: The default limit: nginx and h11 refuse heads of a few tens of KB.
LIMIT_BYTES = 32 * 1024


def _protocols() -> list[type]:
    from service.commands._uvicorn import HeaderTimeoutH11Protocol, uvicorn_options

    return list(dict.fromkeys((uvicorn_options()["http"], HeaderTimeoutH11Protocol)))


@pytest.fixture(scope="module", params=_protocols(), ids=lambda p: p.__name__)
def port(request: pytest.FixtureRequest,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """pipetune's app on a free loopback port, served by ``request.param``."""
    import uvicorn

    directory = tmp_path_factory.mktemp("headers")
    settings = service_settings(f"sqlite:///{directory / 'pipetune.db'}", directory)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(settings, run_background=False),
                                           port=free, http=request.param, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.02)
    yield free
    server.should_exit = True
    thread.join(10)


def _request(port: int, head: bytes, timeout_s: float = 5.0) -> tuple[bytes, float]:
    """Send ``head`` (a request without a body) and read the answer until the server
    closes or has sent one whole response; the answer and the seconds it took. A server
    that closes while the head is still being sent may cut the sending short."""
    started = time.monotonic()
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as conn:
        try:
            for start in range(0, len(head), 64 * 1024):
                conn.sendall(head[start:start + 64 * 1024])
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before it was all sent: the answer is waiting to be read
        try:
            while not _whole(received):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                received += chunk
        except ConnectionResetError:
            pass
    return received, time.monotonic() - started


def _whole(received: bytes) -> bool:
    head, sep, body = received.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False


def _get(path: str, *headers: tuple[str, str]) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close",
             *(f"{name}: {value}" for name, value in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _status(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]
    return int(answer.split(b" ", 2)[1])


def test_ordinary_requests_are_served(port: int) -> None:
    headers = [(f"X-Extra-{i}", "v" * 40) for i in range(40)]
    answer, _ = _request(port, _get("/healthz", ("Cookie", "c=" + "k" * 8000), *headers))
    assert _status(answer) == 200


def test_bodies_and_pipelined_requests_are_not_headers(port: int) -> None:
    """A body longer than the header limit, sent with its head in one write, and requests
    pipelined in one write, are answered as usual."""
    body = b'{"pad": "' + b"p" * (LIMIT_BYTES + 1000) + b'"}'
    post = (f"POST /v1/runs/1/resume HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
            f"\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    keep = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"q" * 4000 + b"\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(post + keep * 12 + _get("/healthz"))
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
    statuses = [int(part[:3]) for part in received.split(b"HTTP/1.1 ")[1:]
                if part[:3].isdigit()]
    assert statuses[0] not in (400, 431) and statuses[1:] == [200] * 13, statuses


def test_a_megabyte_header_is_refused_quickly(port: int) -> None:
    answer, seconds = _request(port, _get("/healthz", ("X-Big", "a" * (1 << 20))))
    assert _status(answer) == 431, answer[:300]
    assert b"header" in answer.split(b"\r\n\r\n", 1)[1]  # the body says what was too large
    assert seconds < 2.0


def test_a_long_url_counts_as_header(port: int) -> None:
    answer, _ = _request(port, _get("/healthz?q=" + "u" * (2 * LIMIT_BYTES)))
    assert _status(answer) == 431


def test_two_hundred_headers_are_refused(port: int) -> None:
    headers = [(f"X-H{i}", "1") for i in range(200)]
    answer, seconds = _request(port, _get("/healthz", *headers))
    assert _status(answer) == 431, answer[:300]
    assert b"headers" in answer.split(b"\r\n\r\n", 1)[1]
    assert seconds < 2.0


def test_healthz_stays_responsive_while_a_huge_header_is_sent(port: int) -> None:
    """The audit's ~60 MB header froze /healthz for 12 s: now the sender is answered 431
    after the limit (it stops sending when the answer comes), and /healthz answers
    meanwhile."""
    outcome: dict[str, Any] = {}

    def send_huge() -> None:
        chunk = b"b" * (1 << 20)
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Huge: ")
            try:
                for _ in range(64):
                    if select.select([conn], [], [], 0)[0]:
                        break  # answered before the end of the header
                    conn.sendall(chunk)
                answer = conn.recv(65536)
            except OSError as exc:
                answer = repr(exc).encode()
        outcome["answer"], outcome["seconds"] = answer, time.monotonic() - started

    sender = threading.Thread(target=send_huge)
    sender.start()
    latencies = []
    while sender.is_alive() or not latencies:
        answer, seconds = _request(port, _get("/healthz"))
        assert _status(answer) == 200
        latencies.append(seconds)
    sender.join()
    assert _status(outcome["answer"]) == 431
    assert outcome["seconds"] < 5.0
    assert max(latencies) < 1.0, latencies


def test_the_limits_are_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from service.commands._uvicorn import uvicorn_options

    monkeypatch.setenv("PIPETUNE_MAX_HEADER_BYTES", "16384")
    monkeypatch.setenv("PIPETUNE_MAX_HEADERS", "50")
    protocol = uvicorn_options()["http"]
    assert (protocol.max_header_bytes, protocol.max_headers) == (16384, 50)
    assert Settings(data_dir=tmp_path).max_header_bytes == 16384
    monkeypatch.delenv("PIPETUNE_MAX_HEADER_BYTES")
    assert Settings(data_dir=tmp_path).max_header_bytes == LIMIT_BYTES
