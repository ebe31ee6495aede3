"""The web dashboard: runs, a run's live progress, the schedules cache, the tuned ranges
(see ``router``)."""

from __future__ import annotations

from fastapi import Depends, FastAPI
from fastapi.staticfiles import StaticFiles

from service.api.auth import require_read
from service.dashboard.login import login_router
from service.dashboard.router import STATIC_DIR, router, templates


def mount_dashboard(app: FastAPI) -> None:
    """Serve the dashboard's pages at ``/`` (they need the ``read`` scope where keys are
    required; ``/login`` takes a key), and its files at ``/static``."""
    app.include_router(router, dependencies=[Depends(require_read)])
    app.include_router(login_router(templates))
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")


__all__ = ["mount_dashboard"]
