"""The client's progress bar follows the budget the user gave (issue 42, item 7): a
budget of seconds alone is stored with the server's trial cap, so a bar over trials read
``1096/10000`` when the run ended on its 60 s; it goes by time then, as the dashboard
does."""

from __future__ import annotations

import json

import httpx
import pytest

import pipetune

RUN = {"id": 3, "status": "queued", "budget": {"trials": 10_000, "seconds": 60.0,
                                                "patience": None}}
EVENTS = "".join(
    f"event: progress\ndata: {json.dumps(data)}\n\n" for data in (
        {"trials_done": 500, "best_latency_us": 210.0, "elapsed_s": 30.0},
        {"trials_done": 1096, "best_latency_us": 200.9, "elapsed_s": 60.0})
) + f"event: end\ndata: {json.dumps({**RUN, 'status': 'succeeded'})}\n\n"


def _server(request: httpx.Request) -> httpx.Response:
    if request.url.path == "/v1/tune":
        return httpx.Response(202, json={"cached": False, "run": RUN, "schedule": None})
    if request.url.path == "/v1/runs/3/events":
        return httpx.Response(200, text=EVENTS, headers={"content-type": "text/event-stream"})
    return httpx.Response(200, json={**RUN, "status": "succeeded", "best": None})


def test_a_seconds_budget_shows_progress_by_time(capsys: pytest.CaptureFixture[str]) -> None:
    http = httpx.Client(transport=httpx.MockTransport(_server), base_url="http://testserver")
    with pipetune.Client(http=http) as api:
        api.tune("gemm", m=256, n=256, k=256, budget={"seconds": 60})
    bar = capsys.readouterr().err
    assert "60/60" in bar and "1096 trials" in bar and "/10000" not in bar, bar
