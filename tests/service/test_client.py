"""The Python client (``import pipetune``) against the service: tune and wait on the run's
events, answer a second tune from the cache, list runs and schedules, and raise typed
errors naming the field; the async client the same way."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fastapi.testclient import TestClient

import pipetune
from pipetune.events import EventParser

SMALL = {"m": 256, "n": 256, "k": 256, "dtype": "float16"}


def test_tune_waits_for_the_run_then_answers_from_the_cache(
    client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    with pipetune.Client(http=client) as api:
        result = api.tune("gemm", SMALL, device="sim:h200", budget={"trials": 8})
        assert not result.cached and result.status == "succeeded"
        assert f"run {result.run['id']}" in capsys.readouterr().err  # the progress bar
        assert result.latency_us is not None and result.latency_us > 0
        run_id = result.run["id"]
        assert api.run(run_id)["status"] == "succeeded"
        assert [r["id"] for r in api.runs(op="gemm")] == [run_id]

        again = api.tune("gemm", device="sim:h200", **SMALL)  # the fields as keywords
        assert again.cached and again.status == "cached"
        assert again.latency_us == result.latency_us
        assert again.run_id == run_id  # the run that found it: its events end at once
        assert [e.name for e in api.events(again.run_id)][-1] == "end"
        (cached,) = api.schedules(op="gemm")
        assert cached["schedule_hash"] == again.schedule["schedule_hash"]


def test_force_and_extend_through_the_client(client: TestClient) -> None:
    with pipetune.Client(http=client) as api:
        first = api.tune("gemm", SMALL, device="sim:h200", budget={"trials": 4}, progress=False)
        forced = api.tune("gemm", SMALL, device="sim:h200", budget={"trials": 4}, force=True,
                          progress=False)
        assert not forced.cached and forced.run_id != first.run_id
        assert forced.status == "succeeded"
        extended = api.tune("gemm", SMALL, device="sim:h200", budget={"trials": 3},
                            extend=True, wait=False)
        assert extended.run_id == forced.run_id and extended.run["budget"]["trials"] == 7
        assert [e.name for e in api.events(extended.run_id)][-1] == "end"
        assert api.run(extended.run_id)["trials_done"] == 7
        with pytest.raises(pipetune.BadRequest) as both:
            api.tune("gemm", SMALL, device="sim:h200", force=True, extend=True)
        assert both.value.field == "extend"


def test_errors_are_typed_and_name_the_field(client: TestClient) -> None:
    api = pipetune.Client(http=client)
    with pytest.raises(pipetune.BadRequest) as bad:
        api.tune("gemm", {**SMALL, "m": 0}, device="sim:h200", wait=False)
    assert bad.value.status == 422 and bad.value.field == "params.m"
    assert "params.m" in str(bad.value)
    with pytest.raises(pipetune.NotFound):
        api.run(987654)
    with pytest.raises(pipetune.NotFound):
        api.kernel("0" * 64)
    started = api.tune("gemm", SMALL, device="sim:h200", budget={"trials": 4}, progress=False)
    with pytest.raises(pipetune.Conflict):
        api.cancel(started.run["id"])  # already finished
    assert isinstance(bad.value, pipetune.ApiError) and isinstance(bad.value,
                                                                   pipetune.PipetuneError)


def test_the_async_client_tunes_and_lists(client: TestClient) -> None:
    async def scenario() -> tuple[pipetune.TuneResult, list]:
        transport = httpx.ASGITransport(app=client.app)
        http = httpx.AsyncClient(transport=transport, base_url="http://testserver")
        async with pipetune.AsyncClient(http=http) as api:
            result = await api.tune("gemm", SMALL, device="sim:h200", budget={"trials": 6})
            return result, await api.runs(op="gemm")

    result, runs = asyncio.run(scenario())
    assert result.status == "succeeded" and [r["id"] for r in runs] == [result.run["id"]]


def test_event_parser_reads_named_events_and_skips_comments() -> None:
    parser = EventParser()
    lines = [": keep-alive", "", "id: 3", "event: trial", 'data: {"number": 3}', "",
             "event: end", 'data: {"status":', 'data: "succeeded"}', ""]
    events = [e for e in map(parser.feed, lines) if e is not None]
    assert [(e.name, e.data) for e in events] == [("trial", {"number": 3}),
                                                  ("end", {"status": "succeeded"})]
