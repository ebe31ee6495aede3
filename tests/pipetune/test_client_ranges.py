"""The Python client and ranges, against a stand-in server (httpx's mock transport): a
range's dimension goes to ``POST /v1/tune`` as given (a ``{"min", "max"}`` dict or a list
of sizes, by keyword or in ``params``), and ``range_artifact`` fetches
``GET /v1/ranges/{id}/artifact``, which ``load`` takes; both clients."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from range_samples import range_dict

import pipetune
from workers import RangeKernel

CACHED = {"cached": True, "run": {"id": 4, "status": "succeeded"},
          "schedule": {"schedule_hash": "s", "kernel_hash": "k", "latency_us": 3.0}}


def _server(seen: list) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.path,
                     json.loads(request.content) if request.content else None))
        if request.url.path == "/v1/tune":
            return httpx.Response(200, json=CACHED)
        if request.url.path == "/v1/ranges/7/artifact":
            return httpx.Response(200, json=range_dict())
        return httpx.Response(404, json={"detail": "range 8 not found"})

    return httpx.MockTransport(answer)


def test_a_range_tune_sends_the_range_as_given_and_its_artifact_loads() -> None:
    seen: list = []
    http = httpx.Client(transport=_server(seen), base_url="http://testserver")
    with pipetune.Client(http=http) as api:
        assert api.tune("gemm", m={"min": 1, "max": 16384}, n=512, k=256,
                        dtype="float16").cached
        api.tune("gemm", {"m": [1, 7, 64], "n": 512, "k": 256}, wait=False)
        artifact = api.range_artifact(7)
        with pytest.raises(pipetune.NotFound):
            api.range_artifact(8)
    assert [body["params"] for _, _, body in seen[:2]] == [
        {"m": {"min": 1, "max": 16384}, "n": 512, "k": 256, "dtype": "float16"},
        {"m": [1, 7, 64], "n": 512, "k": 256}]
    assert seen[2][:2] == ("GET", "/v1/ranges/7/artifact")
    kernel = pipetune.load(artifact)
    assert isinstance(kernel, RangeKernel) and (kernel.low, kernel.high) == (1, 4096)


def test_the_async_client_fetches_a_range_artifact() -> None:
    seen: list = []

    async def scenario() -> dict:
        http = httpx.AsyncClient(transport=_server(seen), base_url="http://testserver")
        async with pipetune.AsyncClient(http=http) as api:
            await api.tune("gemm", m={"min": 1, "max": 64}, n=512, k=256, wait=False)
            return await api.range_artifact(7)

    assert asyncio.run(scenario()) == range_dict()
    assert seen[0][2]["params"]["m"] == {"min": 1, "max": 64}
    assert seen[1][:2] == ("GET", "/v1/ranges/7/artifact")
