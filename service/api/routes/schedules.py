"""``GET /v1/schedules``: the cache of best schedules, filtered by op, device, params."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from scheduler_search.ops import OPERATORS, parse_spec
from service.api.deps import AnswersDep, DatabaseDep
from service.db import repositories as repo
from service.db import stamps
from service.errors import InvalidRequest
from service.runs.devices import device_filter_error
from service.schemas import ErrorPublic, SchedulePublic, SchedulesPublic

router = APIRouter(prefix="/schedules", tags=["schedules"])

_PARAMS_HELP = (
    'Exact params as a JSON object, e.g. {"m":4096,"n":4096,"k":4096}. With `op` and a '
    "complete spec the workload is matched exactly (defaults filled in); otherwise every "
    "given param must be equal."
)


def _query_error(field: str, msg: str) -> InvalidRequest:
    return InvalidRequest([{"loc": (field,), "msg": msg, "type": "value_error"}], where="query")


def _parse_params(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise _query_error("params", f"not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise _query_error("params", "must be a JSON object")
    return value


@router.get("", response_model=SchedulesPublic, responses={422: {"model": ErrorPublic}})
def list_schedules(
    db: DatabaseDep,
    answers: AnswersDep,
    op: Annotated[str | None, Query(max_length=64)] = None,
    device: Annotated[str | None, Query(
        max_length=64, description="A device name (sim:h200, cuda:0) or key.")] = None,
    params: Annotated[str | None, Query(max_length=4096, description=_PARAMS_HELP)] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    offset: Annotated[int, Query(ge=0, le=repo.MAX_DB_INT)] = 0,
) -> Response:
    """Cached best schedules, newest first (a connection is held for the query only)."""
    if op is not None and op not in OPERATORS:
        raise _query_error("op", f"unknown operator {op!r}; known: {', '.join(sorted(OPERATORS))}")
    problem = device_filter_error(device) if device is not None else None
    if problem is not None:
        raise _query_error("device", problem)
    wanted = _parse_params(params) if params is not None else None
    # The same list as last time, while no cached schedule has changed.
    key = ("schedules", op, device, params, limit, offset)
    stamp = stamps.schedules_stamp(db.read_engine)
    if (remembered := answers.get(key, stamp)) is not None:
        return Response(remembered, media_type="application/json")
    page = _page(db, op, device, wanted, limit, offset)
    response = JSONResponse(page.model_dump(mode="json"))
    answers.put(key, stamp, bytes(response.body))
    return response


def _page(db: DatabaseDep, op: str | None, device: str | None,
          wanted: dict[str, Any] | None, limit: int, offset: int) -> SchedulesPublic:
    """The filtered cache, built from its rows."""
    workload_key = None
    if wanted is not None and op is not None:
        try:
            workload_key = parse_spec(op, wanted).workload_key()
        except ValidationError:
            workload_key = None  # a partial spec: compare the given params one by one
    with repo.session_scope(db.read_sessions) as session:
        rows = repo.list_schedules(
            session, op=op, device=device, workload_key=workload_key, limit=100_000
        )
        if wanted is not None and workload_key is None:
            rows = [r for r in rows
                    if all(r.workload.params.get(k) == v for k, v in wanted.items())]
        page = [SchedulePublic.of(r) for r in rows[offset : offset + limit]]
    return SchedulesPublic(data=page, count=len(rows))
