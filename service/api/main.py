"""The v1 API router: one router per resource (health and metrics sit at the root; the
dashboard's HTML pages are mounted by ``service.dashboard``)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from service.api.auth import require_read
from service.api.routes import (
    devices,
    health,
    insights,
    kernels,
    ops,
    ranges,
    runs,
    schedules,
    tune,
)

#: Every v1 route needs at least the ``read`` scope (where keys are required at all).
api_router = APIRouter(prefix="/v1", dependencies=[Depends(require_read)])
api_router.include_router(tune.router)
api_router.include_router(runs.router)
api_router.include_router(insights.router)
api_router.include_router(schedules.router)
api_router.include_router(ranges.router)
api_router.include_router(kernels.router)
api_router.include_router(devices.router)
api_router.include_router(ops.router)

root_router = APIRouter()
root_router.include_router(health.router)
