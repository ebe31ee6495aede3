"""The dashboard's HTML pages (server-rendered with Jinja2) and its static files.

Pages: ``/`` the runs list (``/runs/table`` is its live-refreshed table alone),
``/runs/{id}`` a run (``/runs/{id}/trials`` its trials table's rows, invalid points left
out unless asked for), ``/schedules`` the cache, ``/schedules/{id}`` one entry,
``/ranges`` the tuned ranges, ``/ranges/{id}`` one range's buckets. The pages
draw their charts in the browser from the JSON API (``/v1/runs/{id}/convergence``,
``/importance``, ``/timeline``, ``/source``, ``/events``) with plotly.js, which is served
from the installed ``plotly`` package (``/static/vendor/plotly.min.js``): no front-end
build step and no network needed.
"""

from __future__ import annotations

import gzip
import math
import threading
from functools import cache
from importlib import resources
from pathlib import Path as FilePath
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from scheduler_search.ops import OPERATORS
from scheduler_search.search import INVALID
from service.api.deps import SessionDep, SettingsDep
from service.dashboard.operators import operator_text
from service.dashboard.views import (
    ESTIMATE_NOTE,
    RangeBucketRow,
    RangeTableRow,
    RunRow,
    ScheduleRow,
    duration_text,
    latency_text,
    matches_shape,
    shape_text,
    speedup_text,
    time_text,
    timing_note,
    vendor_baseline_us,
)
from service.db import processes
from service.db import ranges as ranges_repo
from service.db import repositories as repo
from service.db.models import RunKind, RunStatus, utcnow
from service.runs.insights import MIN_TRIALS_FOR_IMPORTANCE
from service.schemas import TrialPublic, TrialsPublic, timing_method_text, waiting_reason

HERE = FilePath(__file__).parent
STATIC_DIR = HERE / "static"
templates = Jinja2Templates(directory=HERE / "templates")


def csrf_token(request: Request) -> str | None:
    """The CSRF token of the request's dashboard session, for its page's scripts to send
    with writes (``None`` without a session: no key needed, or an API key)."""
    credential = getattr(request.state, "credential", None)
    return getattr(credential, "csrf_token", None)


templates.env.globals.update(ESTIMATE_NOTE=ESTIMATE_NOTE, duration_text=duration_text,
                             csrf_token=csrf_token)

#: Rows per page of the runs list and the schedules page.
PAGE_SIZE = 50
#: How often the runs list refreshes itself (milliseconds).
RUNS_REFRESH_MS = 2000

router = APIRouter(include_in_schema=False)

Filter = Annotated[str | None, Query(max_length=128)]
PageNo = Annotated[int, Query(ge=1, le=1_000_000)]
PageId = Annotated[int, Path(ge=1, le=2**62)]
TrialOrder = Literal["number", "-number", "latency_us", "-latency_us", "status", "-status"]


def _clean(value: str | None) -> str | None:
    return value.strip() or None if value else None


def _pages(count: int, page: int, query: dict[str, Any], base: str) -> dict[str, Any]:
    pages = max(1, math.ceil(count / PAGE_SIZE))
    page = min(page, pages)
    kept = {k: v for k, v in query.items() if v}

    def link(number: int) -> str:
        return f"{base}?{urlencode({**kept, 'page': number})}"

    return {
        "page": page,
        "pages": pages,
        "count": count,
        "first": (page - 1) * PAGE_SIZE + 1 if count else 0,
        "last": min(count, page * PAGE_SIZE),
        "prev": link(page - 1) if page > 1 else None,
        "next": link(page + 1) if page < pages else None,
    }


def _runs_context(
    session: SessionDep, max_trials: int, op: str | None, status: str | None,
    device: str | None, page: int,
) -> dict[str, Any]:
    op, status, device = _clean(op), _clean(status), _clean(device)
    if status is not None and status not in {s.value for s in RunStatus}:
        status = None
    _, count = repo.list_runs(session, status=status, op=op, device=device, limit=1)
    pager = _pages(count, page, {"op": op, "status": status, "device": device}, "/")
    rows, _ = repo.list_runs(
        session, status=status, op=op, device=device, limit=PAGE_SIZE,
        offset=(pager["page"] - 1) * PAGE_SIZE,
    )
    now = utcnow()
    filters = {"op": op or "", "status": status or "", "device": device or ""}
    runs = [RunRow.of(r, max_trials, now) for r in rows]
    return {
        "runs": runs,
        # No column of dashes: the baseline column only where a run on the page has one.
        "show_baseline": any(r.has_baseline for r in runs),
        "pager": pager,
        "filters": filters,
        "table_query": urlencode({**{k: v for k, v in filters.items() if v},
                                  "page": pager["page"]}),
        "by_status": repo.count_runs_by_status(session),
        "statuses": [s.value for s in RunStatus],
    }


def _not_found(request: Request, message: str) -> HTMLResponse:
    return templates.TemplateResponse(
        request, "not_found.html", {"message": message, "nav": ""}, status_code=404
    )


@router.get("/", response_class=HTMLResponse)
def runs_page(
    request: Request, session: SessionDep, settings: SettingsDep, op: Filter = None,
    status: Filter = None, device: Filter = None, page: PageNo = 1,
) -> HTMLResponse:
    context = _runs_context(session, settings.max_trials, op, status, device, page)
    context.update(
        operators=sorted(OPERATORS),
        devices=sorted({d.name for d in repo.list_devices(session)}),
        refresh_ms=RUNS_REFRESH_MS,
        nav="runs",
    )
    return templates.TemplateResponse(request, "runs.html", context)


@router.get("/runs/table", response_class=HTMLResponse)
def runs_table(
    request: Request, session: SessionDep, settings: SettingsDep, op: Filter = None,
    status: Filter = None, device: Filter = None, page: PageNo = 1,
) -> HTMLResponse:
    """The runs list's table alone: what the page swaps in every ``RUNS_REFRESH_MS``."""
    context = _runs_context(session, settings.max_trials, op, status, device, page)
    return templates.TemplateResponse(request, "_runs_table.html", context)


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(
    request: Request, session: SessionDep, settings: SettingsDep, run_id: PageId
) -> HTMLResponse:
    run = repo.get_run(session, run_id=run_id)
    if run is None:
        return _not_found(request, f"There is no run {run_id}.")
    cached = None
    if run.best_schedule_hash is not None:
        entry = repo.schedule_of_run(
            session, run_id=run.id, schedule_hash=run.best_schedule_hash
        )
        cached = entry.id if entry is not None else None
    waiting = None
    if run.status == RunStatus.QUEUED.value:
        served = processes.served_keys(session, stale_after_s=settings.stale_after_s)
        waiting = waiting_reason(run, served)
    table = (ranges_repo.range_table_of_run(session, run_id=run.id)
             if run.kind == RunKind.RANGE.value else None)
    context = {
        "run": RunRow.of(run, settings.max_trials),
        "range_id": table.id if table is not None else None,
        "waiting": waiting,
        "text": operator_text(run.workload.op),
        "schedule_id": cached,
        "min_importance_trials": MIN_TRIALS_FOR_IMPORTANCE,
        "nav": "runs",
    }
    return templates.TemplateResponse(request, "run.html", context)


@router.get("/runs/{run_id}/trials", response_model=TrialsPublic)
def run_trials(
    session: SessionDep, run_id: PageId, status: Filter = None, order: TrialOrder = "number",
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    offset: Annotated[int, Query(ge=0, le=2**31)] = 0,
    invalid: Literal["hide", "show"] = "hide",
) -> TrialsPublic:
    """The run page's trials table: ``GET /v1/runs/{id}/trials`` without the invalid
    points unless ``invalid=show`` (or ``status=invalid``)."""
    rows, count = repo.list_trials(
        session, run_id=run_id, status=_clean(status),
        exclude_status=None if invalid == "show" else INVALID,
        order=order, limit=limit, offset=offset,
    )
    return TrialsPublic(data=[TrialPublic.of(t) for t in rows], count=count)


@router.get("/schedules", response_class=HTMLResponse)
def schedules_page(
    request: Request, session: SessionDep, op: Filter = None, device: Filter = None,
    shape: Filter = None, page: PageNo = 1,
) -> HTMLResponse:
    op, device, shape = _clean(op), _clean(device), _clean(shape)
    rows = repo.schedule_summaries(session, op=op, device=device)
    if shape:
        rows = [r for r in rows if matches_shape(shape, r.op, r.params)]
    pager = _pages(len(rows), page, {"op": op, "device": device, "shape": shape}, "/schedules")
    start = (pager["page"] - 1) * PAGE_SIZE
    schedules = [ScheduleRow.of(r) for r in rows[start : start + PAGE_SIZE]]
    context = {
        "schedules": schedules,
        "show_baseline": any(s.has_baseline for s in schedules),
        "pager": pager,
        "filters": {"op": op or "", "device": device or "", "shape": shape or ""},
        "operators": sorted(OPERATORS),
        "devices": sorted({d.name for d in repo.list_devices(session)}),
        "nav": "schedules",
    }
    return templates.TemplateResponse(request, "schedules.html", context)


@router.get("/schedules/{schedule_id}", response_class=HTMLResponse)
def schedule_page(request: Request, session: SessionDep, schedule_id: PageId) -> HTMLResponse:
    row = repo.get_schedule(session, schedule_id=schedule_id)
    if row is None:
        return _not_found(request, f"There is no cached schedule {schedule_id}.")
    context = {
        "entry": row,
        "shape": shape_text(row.workload.op, row.workload.params),
        "latency": latency_text(row.latency_us),
        "predicted": latency_text(row.predicted_us),
        "speedup": speedup_text(row.latency_us, vendor_baseline_us(row)),
        "baseline": getattr(row, "baseline", None),
        "baseline_latency": latency_text(vendor_baseline_us(row)),
        "timed_by": timing_method_text(row.timing_method),
        "timing_note": timing_note(row.timing_method),
        "text": operator_text(row.workload.op),
        "updated": time_text(row.updated_at),
        "nav": "schedules",
    }
    return templates.TemplateResponse(request, "schedule.html", context)


@router.get("/ranges", response_class=HTMLResponse)
def ranges_page(
    request: Request, session: SessionDep, op: Filter = None, device: Filter = None,
    page: PageNo = 1,
) -> HTMLResponse:
    op, device = _clean(op), _clean(device)
    _, count = ranges_repo.list_range_tables(session, op=op, device=device, limit=1)
    pager = _pages(count, page, {"op": op, "device": device}, "/ranges")
    rows, _ = ranges_repo.list_range_tables(session, op=op, device=device, limit=PAGE_SIZE,
                                            offset=(pager["page"] - 1) * PAGE_SIZE)
    context = {
        "ranges": [RangeTableRow.of(r) for r in rows],
        "pager": pager,
        "filters": {"op": op or "", "device": device or ""},
        "operators": sorted(OPERATORS),
        "devices": sorted({d.name for d in repo.list_devices(session)}),
        "nav": "ranges",
    }
    return templates.TemplateResponse(request, "ranges.html", context)


@router.get("/ranges/{table_id}", response_class=HTMLResponse)
def range_page(request: Request, session: SessionDep, table_id: PageId) -> HTMLResponse:
    row = ranges_repo.get_range_table(session, table_id=table_id)
    if row is None:
        return _not_found(request, f"There is no range table {table_id}.")
    context = {
        "table": RangeTableRow.of(row),
        "buckets": [RangeBucketRow.of(b) for b in row.buckets],
        "artifact_available": all(b.get("kernel_hash") for b in row.buckets),
        "text": operator_text(row.op),
        "nav": "ranges",
    }
    return templates.TemplateResponse(request, "range.html", context)


# ----- plotly.js from the installed plotly package ----------------------------------------------
@cache
def _plotly_js() -> tuple[bytes, bytes, str]:
    """plotly.js as shipped in the ``plotly`` wheel (MIT), raw and gzipped, and its version."""
    raw = resources.files("plotly").joinpath("package_data", "plotly.min.js").read_bytes()
    head = raw[:200].decode("utf-8", "replace")
    version = head.split("plotly.js v", 1)[1].split()[0] if "plotly.js v" in head else "?"
    return raw, gzip.compress(raw, compresslevel=6), version


_plotly_lock = threading.Lock()


@router.get("/static/vendor/plotly.min.js")
def plotly_js(request: Request) -> Response:
    with _plotly_lock:
        raw, packed, version = _plotly_js()
    headers = {
        "Cache-Control": "public, max-age=86400",
        "ETag": f'"plotly-{version}"',
        "Vary": "Accept-Encoding",
    }
    if request.headers.get("if-none-match") == headers["ETag"]:
        return Response(status_code=304, headers=headers)
    if "gzip" in request.headers.get("accept-encoding", ""):
        return Response(packed, media_type="text/javascript",
                        headers={**headers, "Content-Encoding": "gzip"})
    return Response(raw, media_type="text/javascript", headers=headers)
