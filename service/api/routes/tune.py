"""``POST /v1/tune``: a cached best schedule (200), or the run that will find it (202);
one answer shape for both (:class:`~service.schemas.TuneResponse`). A range request
(``"m": {"min": 1, "max": 16384}``) answers a tuned range that covers it (200) or the
range run that will tune it (202). A pipeline (``mamba2_ssd``) answers its kernels' cached
schedules and the plan served (200), or the runs that tune its kernels (202)."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from service.api.auth import TunerDep, check_can_manage
from service.api.deps import AnswersDep, DatabaseDep, MetricsDep, RunManagerDep, SettingsDep
from service.auth import Principal
from service.core.db import Database
from service.core.metrics import Metrics
from service.db import fleet, stamps
from service.db import repositories as repo
from service.db.models import RunModel
from service.errors import Forbidden, InvalidRequest
from service.runs.manager import ReopenCheck, RunManager, Submitted
from service.runs.pipelines import PipelineTuneInput, pending_run, pipeline_public
from service.runs.tune import RangeTuneInput, prepare_any
from service.schemas import (
    AUTH_RESPONSES,
    ErrorPublic,
    RangeTablePublic,
    RunPublic,
    SchedulePublic,
    TuneRequest,
    TuneResponse,
)

router = APIRouter(prefix="/tune", tags=["tune"])


@router.post(
    "",
    status_code=202,
    response_model=TuneResponse,
    responses={
        200: {"model": TuneResponse, "description": "Cache hit: `cached` true, the best "
              "known `schedule` and the `run` that found it."},
        202: {"model": TuneResponse, "description": "A run (new, extended, or the one "
              "already running; `Location` names it); `schedule` is null."},
        400: {"model": ErrorPublic, "description": "The body is not JSON."},
        422: {"model": ErrorPublic, "description": "A field is wrong; `field` names it."},
        **AUTH_RESPONSES,
    },
)
def tune(
    request: TuneRequest, manager: RunManagerDep, settings: SettingsDep, metrics: MetricsDep,
    principal: TunerDep, db: DatabaseDep, answers: AnswersDep,
) -> Response:
    """Tune an operator for a device: the cached best schedule, or a (shared) run;
    ``force`` runs despite the cache, ``extend`` continues the workload's newest run."""
    try:
        tune_input = prepare_any(request, settings, fleet_devices=lambda: _fleet(db))
    except InvalidRequest:
        metrics.tune_requests.labels("invalid").inc()
        raise
    may_reopen = _owned_by(principal) if tune_input.extend else None
    if isinstance(tune_input, RangeTuneInput):
        return _tune_range(tune_input, manager, principal.key_id, metrics, may_reopen)
    if isinstance(tune_input, PipelineTuneInput):
        return _tune_pipeline(tune_input, manager, principal.key_id, metrics, may_reopen)
    stamp = key = None
    if not (tune_input.force or tune_input.extend):
        # The same cache hit as last time, while its schedule and run rows are unchanged.
        key = (tune_input.spec.workload_key(), tune_input.device.key)
        stamp = stamps.cache_hit_stamp(db.read_engine, workload_key=key[0], device_key=key[1])
        if stamp is not None and (remembered := answers.get(key, stamp)) is not None:
            metrics.tune_requests.labels("cache_hit").inc()
            return Response(remembered, status_code=200, media_type="application/json")
    try:
        submitted = manager.submit(tune_input, key_id=principal.key_id, may_reopen=may_reopen)
    except InvalidRequest:
        metrics.tune_requests.labels("invalid").inc()
        raise
    run = RunPublic.of(submitted.run) if submitted.run is not None else None
    if submitted.served is not None:  # an exact size a tuned range holds
        body = TuneResponse(cached=True, run=run,
                            schedule=SchedulePublic.of_range(submitted.served))
        return JSONResponse(body.model_dump(mode="json"), status_code=200)
    if submitted.schedule is not None:
        body = TuneResponse(cached=True, run=run,
                            schedule=SchedulePublic.of(submitted.schedule))
        response = JSONResponse(body.model_dump(mode="json"), status_code=200)
        if stamp is not None:
            answers.put(key, stamp, bytes(response.body))
        return response
    assert run is not None
    body = TuneResponse(cached=False, run=run, schedule=None)
    return JSONResponse(body.model_dump(mode="json"), status_code=202,
                        headers={"Location": f"/v1/runs/{run.id}"})


def _owned_by(principal: Principal) -> ReopenCheck:
    """An ``extend`` queues the workload's newest run again if it has finished, which,
    as a resume, only its owner or an admin may (an active run is joined, as any tune
    request joins it; without a run the request starts one of its own). The manager
    calls the check in the transaction that queues the run again.

    Raises:
        Forbidden: the run to queue again is another key's.
    """

    def check(run: RunModel) -> None:
        try:
            check_can_manage(principal, run.id, run.key_id)
        except Forbidden as exc:
            raise Forbidden(f"{exc} (extend continues it; force starts a run of your "
                            "own)") from exc

    return check


def _tune_range(tune_input: RangeTuneInput, manager: RunManager, key_id: int | None,
                metrics: Metrics, may_reopen: ReopenCheck | None) -> Response:
    """A range request: the tuned range that covers it (200), or its range run (202)."""
    try:
        submitted: Submitted = manager.submit_range(tune_input, key_id=key_id,
                                                    may_reopen=may_reopen)
    except InvalidRequest:
        metrics.tune_requests.labels("invalid").inc()
        raise
    run = RunPublic.of(submitted.run) if submitted.run is not None else None
    if submitted.range_table is not None:
        body = TuneResponse(cached=True, run=run, schedule=None,
                            range=RangeTablePublic.of(submitted.range_table))
        return JSONResponse(body.model_dump(mode="json"), status_code=200)
    assert run is not None
    body = TuneResponse(cached=False, run=run, schedule=None)
    return JSONResponse(body.model_dump(mode="json"), status_code=202,
                        headers={"Location": f"/v1/runs/{run.id}"})


def _tune_pipeline(tune_input: PipelineTuneInput, manager: RunManager, key_id: int | None,
                   metrics: Metrics, may_reopen: ReopenCheck | None) -> Response:
    """A pipeline: every kernel's cached schedule (200), or the runs that tune the ones
    missing (202, ``Location`` naming the first)."""
    parts = {}
    try:
        for role, kernel in tune_input.kernels.items():
            submitted = manager.submit(kernel, key_id=key_id, may_reopen=may_reopen)
            parts[role] = (RunPublic.of(submitted.run) if submitted.run is not None else None,
                           SchedulePublic.of(submitted.schedule)
                           if submitted.schedule is not None else None)
    except InvalidRequest:
        metrics.tune_requests.labels("invalid").inc()
        raise
    pending = pending_run(parts)
    pipeline = pipeline_public(tune_input, parts)
    body = TuneResponse(cached=pending is None and pipeline.plan is not None, run=pending,
                        schedule=None, pipeline=pipeline)
    if body.cached:
        metrics.tune_requests.labels("cache_hit").inc()
        return JSONResponse(body.model_dump(mode="json"), status_code=200)
    headers = {"Location": f"/v1/runs/{pending.id}"} if pending is not None else None
    return JSONResponse(body.model_dump(mode="json"), status_code=202, headers=headers)


def _fleet(db: Database) -> list[fleet.FleetDevice]:
    """The registered fleet, read only when a request names a fleet device."""
    with repo.session_scope(db.sessions) as session:
        return fleet.fleet_devices(session)
