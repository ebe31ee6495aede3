"""The service from Python: :class:`Client` (blocking) and :class:`AsyncClient`, over httpx.

Both have the same methods. ``tune`` posts a spec; on a cache hit it returns the cached
schedule (and the run that found it) at once, otherwise the run, and with ``wait=True``
it follows the run's server-sent events (a progress bar on a terminal) until it ends.
``kernel(hash)`` returns the kernel artifact that :func:`pipetune.load` turns into a
callable; ``range_artifact(range_id)`` the kernels of a tuned size range, which ``load``
turns into one callable for every size of the range. A range is tuned like any workload,
its dimension given as a range or a list of sizes:
``client.tune("gemm", m={"min": 1, "max": 16384}, n=4096, k=4096, dtype="float16")``.
An error answer raises a typed :class:`~pipetune.errors.ApiError` naming the field.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from pipetune.errors import api_error
from pipetune.events import Event, EventParser
from pipetune.results import TuneResult

DEFAULT_URL = "http://127.0.0.1:8000"
#: Seconds for a request; event streams wait for the run without a read timeout.
DEFAULT_TIMEOUT_S = 30.0


#: Where the key comes from when no ``api_key`` is given.
API_KEY_ENV = "PIPETUNE_API_KEY"


def _headers(api_key: str | None) -> dict[str, str]:
    """The Authorization header of ``api_key``, else of ``$PIPETUNE_API_KEY``, if any."""
    api_key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _tune_body(op: str, params: dict[str, Any] | None, device: str | None,
               budget: dict[str, Any] | None, force: bool, extend: bool,
               fields: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"op": op, "params": {**(params or {}), **fields}}
    if device is not None:
        body["device"] = device
    if budget is not None:
        body["budget"] = budget
    if force:
        body["force"] = True
    if extend:
        body["extend"] = True
    return body


def _pending_role(result: TuneResult) -> str:
    """The role in its pipeline of the kernel whose run ``result.run`` is."""
    run_id = (result.run or {}).get("id")
    return next(kernel["role"] for kernel in (result.pipeline or {}).get("kernels", [])
                if (kernel["run"] or {}).get("id") == run_id)


def _plain(body: dict[str, Any]) -> dict[str, Any]:
    """The tune request without ``force`` and ``extend``: asked again, it only joins."""
    return {key: value for key, value in body.items() if key not in ("force", "extend")}


def _json(response: httpx.Response) -> Any:
    """The answer's JSON, or the typed error of an error status."""
    if response.is_error:
        try:
            body: Any = response.json()
        except ValueError:
            body = response.text
        raise api_error(response.status_code, body)
    return response.json()


class _Progress:
    """A tqdm bar over the run's budget, fed by its ``progress`` events (silent if off):
    by time for a budget of seconds (whose trials are the server's cap, no plan of the
    user's), else by trials."""

    def __init__(self, run: dict[str, Any], show: bool) -> None:
        self._bar = None
        budget = run.get("budget") or {}
        self._seconds: float | None = budget.get("seconds")
        if show:
            from tqdm.auto import tqdm

            total = self._seconds or budget.get("trials")
            self._bar = tqdm(total=total, desc=f"run {run['id']}",
                             unit="s" if self._seconds else "trial")

    def update(self, event: Event) -> None:
        if self._bar is None or event.name != "progress":
            return
        trials = int(event.data.get("trials_done") or 0)
        best = event.data.get("best_latency_us")
        best_text = f"best {best:.2f} us" if best else ""
        if self._seconds:
            self._bar.n = min(round(float(event.data.get("elapsed_s") or 0)), self._seconds)
            best_text = f"{trials} trials" + (f", {best_text}" if best_text else "")
        else:
            self._bar.n = trials
        self._bar.set_postfix_str(best_text, refresh=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class Client:
    """A pipetune server, e.g. ``Client("http://gpu-box:8000", api_key=...)`` (the key
    defaults to ``$PIPETUNE_API_KEY``; none is needed on loopback)."""

    def __init__(self, url: str = DEFAULT_URL, api_key: str | None = None, *,
                 timeout_s: float = DEFAULT_TIMEOUT_S, http: httpx.Client | None = None) -> None:
        """``http``: an httpx client of your own (proxies, TLS, a test client) instead."""
        self._http = http or httpx.Client(base_url=url, headers=_headers(api_key),
                                          timeout=timeout_s)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def tune(self, op: str, params: dict[str, Any] | None = None, *, device: str | None = None,
             budget: dict[str, Any] | None = None, force: bool = False, extend: bool = False,
             wait: bool = True, progress: bool = True, **fields: Any) -> TuneResult:
        """Tune ``op`` for ``params`` (or the spec's fields as keywords: ``m=4096``; a
        range as ``m={"min": 1, "max": 16384}`` or a list of sizes, sent as given).

        ``force``: a new run even on a cache hit; ``extend``: continue the workload's
        newest run with ``budget`` more. Returns the cached schedule on a hit; otherwise
        the run, finished if ``wait``. A range's answer carries its bucket table
        (``result.range``; ``load(client.range_artifact(result.range_id))`` runs it).
        """
        body = _tune_body(op, params, device, budget, force, extend, fields)
        response = self._http.post("/v1/tune", json=body)
        result = TuneResult.of_answer(_json(response))
        if result.cached or not wait:
            return result
        if result.pipeline is not None:
            return self._wait_for_pipeline(result, body, progress)
        assert result.run is not None
        self._follow(result.run, progress)
        run = self.run(result.run["id"])
        table = self.range(run["range_id"]) if run.get("range_id") else None
        return TuneResult(cached=False, run=run, range=table)

    def _follow(self, run: dict[str, Any], progress: bool) -> None:
        bar = _Progress(run, progress)
        try:
            for event in self.events(run["id"]):
                bar.update(event)
        finally:
            bar.close()

    def _wait_for_pipeline(self, result: TuneResult, body: dict[str, Any],
                           progress: bool) -> TuneResult:
        """Follow a pipeline's kernel runs one after the other, then ask again (a plain
        request, which joins a run and starts one only for a kernel whose run failed) for
        its answer with every schedule; each kernel is followed once, so a kernel that
        fails ends the wait with its run in the answer."""
        followed: set[str] = set()
        while result.run is not None and _pending_role(result) not in followed:
            followed.add(_pending_role(result))
            self._follow(result.run, progress)
            result = TuneResult.of_answer(_json(self._http.post("/v1/tune",
                                                                json=_plain(body))))
        return TuneResult(cached=False, run=result.run, pipeline=result.pipeline)

    def events(self, run_id: int) -> Iterator[Event]:
        """The run's server-sent events until its ``end`` (or ``error``) event."""
        parser = EventParser()
        with self._http.stream("GET", f"/v1/runs/{run_id}/events",
                               timeout=httpx.Timeout(DEFAULT_TIMEOUT_S, read=None)) as response:
            if response.is_error:
                response.read()
                _json(response)
            for line in response.iter_lines():
                event = parser.feed(line)
                if event is not None:
                    yield event
                    if event.name in ("end", "error"):
                        return

    def run(self, run_id: int) -> dict[str, Any]:
        return _json(self._http.get(f"/v1/runs/{run_id}"))

    def runs(self, **filters: Any) -> list[dict[str, Any]]:
        """Runs, newest first; filters as the API takes them (``op``, ``status``, ...)."""
        return _json(self._http.get("/v1/runs", params=filters))["data"]

    def cancel(self, run_id: int) -> dict[str, Any]:
        return _json(self._http.delete(f"/v1/runs/{run_id}"))

    def schedules(self, **filters: Any) -> list[dict[str, Any]]:
        """Cached best schedules (filters: ``op``, ``device``, ...)."""
        return _json(self._http.get("/v1/schedules", params=filters))["data"]

    def kernel(self, kernel_hash: str) -> dict[str, Any]:
        """The kernel artifact (source, launch contract): what :func:`pipetune.load` takes."""
        return _json(self._http.get(f"/v1/kernels/{kernel_hash}"))

    def range(self, range_id: int | str) -> dict[str, Any]:
        """A tuned range's table (``GET /v1/ranges/{id}``): its buckets, each with its
        kernel's hash, its schedule and its latencies at the sampled sizes."""
        return _json(self._http.get(f"/v1/ranges/{range_id}"))

    def range_artifact(self, range_id: int | str) -> dict[str, Any]:
        """A tuned range's kernels (the RangeArtifact JSON: its buckets of sizes, each with
        its kernel): what :func:`pipetune.load` turns into one callable for the range."""
        return _json(self._http.get(f"/v1/ranges/{range_id}/artifact"))


class AsyncClient:
    """:class:`Client` for asyncio: the same methods, awaited."""

    def __init__(self, url: str = DEFAULT_URL, api_key: str | None = None, *,
                 timeout_s: float = DEFAULT_TIMEOUT_S,
                 http: httpx.AsyncClient | None = None) -> None:
        self._http = http or httpx.AsyncClient(base_url=url, headers=_headers(api_key),
                                               timeout=timeout_s)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def tune(self, op: str, params: dict[str, Any] | None = None, *,
                   device: str | None = None, budget: dict[str, Any] | None = None,
                   force: bool = False, extend: bool = False, wait: bool = True,
                   progress: bool = False, **fields: Any) -> TuneResult:
        body = _tune_body(op, params, device, budget, force, extend, fields)
        response = await self._http.post("/v1/tune", json=body)
        result = TuneResult.of_answer(_json(response))
        if result.cached or not wait:
            return result
        if result.pipeline is not None:
            return await self._wait_for_pipeline(result, body, progress)
        assert result.run is not None
        await self._follow(result.run, progress)
        run = await self.run(result.run["id"])
        table = await self.range(run["range_id"]) if run.get("range_id") else None
        return TuneResult(cached=False, run=run, range=table)

    async def _follow(self, run: dict[str, Any], progress: bool) -> None:
        bar = _Progress(run, progress)
        try:
            async for event in self.events(run["id"]):
                bar.update(event)
        finally:
            bar.close()

    async def _wait_for_pipeline(self, result: TuneResult, body: dict[str, Any],
                                 progress: bool) -> TuneResult:
        """As :meth:`Client._wait_for_pipeline`."""
        followed: set[str] = set()
        while result.run is not None and _pending_role(result) not in followed:
            followed.add(_pending_role(result))
            await self._follow(result.run, progress)
            response = await self._http.post("/v1/tune", json=_plain(body))
            result = TuneResult.of_answer(_json(response))
        return TuneResult(cached=False, run=result.run, pipeline=result.pipeline)

    async def events(self, run_id: int) -> AsyncIterator[Event]:
        parser = EventParser()
        async with self._http.stream(
                "GET", f"/v1/runs/{run_id}/events",
                timeout=httpx.Timeout(DEFAULT_TIMEOUT_S, read=None)) as response:
            if response.is_error:
                await response.aread()
                _json(response)
            async for line in response.aiter_lines():
                event = parser.feed(line)
                if event is not None:
                    yield event
                    if event.name in ("end", "error"):
                        return

    async def run(self, run_id: int) -> dict[str, Any]:
        return _json(await self._http.get(f"/v1/runs/{run_id}"))

    async def runs(self, **filters: Any) -> list[dict[str, Any]]:
        return _json(await self._http.get("/v1/runs", params=filters))["data"]

    async def cancel(self, run_id: int) -> dict[str, Any]:
        return _json(await self._http.delete(f"/v1/runs/{run_id}"))

    async def schedules(self, **filters: Any) -> list[dict[str, Any]]:
        return _json(await self._http.get("/v1/schedules", params=filters))["data"]

    async def kernel(self, kernel_hash: str) -> dict[str, Any]:
        return _json(await self._http.get(f"/v1/kernels/{kernel_hash}"))

    async def range(self, range_id: int | str) -> dict[str, Any]:
        return _json(await self._http.get(f"/v1/ranges/{range_id}"))

    async def range_artifact(self, range_id: int | str) -> dict[str, Any]:
        return _json(await self._http.get(f"/v1/ranges/{range_id}/artifact"))
