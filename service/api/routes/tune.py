"""``POST /v1/tune``: a cached best schedule (200), or the run that will find it (202)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from service.api.deps import MetricsDep, RunManagerDep, SettingsDep
from service.errors import InvalidRequest
from service.runs.tune import prepare
from service.schemas import ErrorPublic, RunPublic, SchedulePublic, TuneRequest

router = APIRouter(prefix="/tune", tags=["tune"])


@router.post(
    "",
    status_code=202,
    response_model=RunPublic,
    responses={
        200: {"model": SchedulePublic, "description": "Cache hit: the best known schedule."},
        202: {"model": RunPublic, "description": "A run (new, or the one already running)."},
        400: {"model": ErrorPublic, "description": "The body is not JSON."},
        422: {"model": ErrorPublic, "description": "A field is wrong; `field` names it."},
    },
)
def tune(
    request: TuneRequest, manager: RunManagerDep, settings: SettingsDep, metrics: MetricsDep
) -> JSONResponse:
    """Tune an operator for a device: the cached best schedule, or a (shared) run."""
    try:
        tune_input = prepare(request, settings)
    except InvalidRequest:
        metrics.tune_requests.labels("invalid").inc()
        raise
    submitted = manager.submit(tune_input)
    if submitted.schedule is not None:
        body = SchedulePublic.of(submitted.schedule).model_dump(mode="json")
        return JSONResponse(body, status_code=200)
    assert submitted.run is not None
    body = RunPublic.of(submitted.run).model_dump(mode="json")
    return JSONResponse(
        body, status_code=202, headers={"Location": f"/v1/runs/{submitted.run.id}"}
    )
