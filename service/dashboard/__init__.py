"""The web dashboard: runs, a run's live progress, the schedules cache (see ``router``)."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from service.dashboard.router import STATIC_DIR, router


def mount_dashboard(app: FastAPI) -> None:
    """Serve the dashboard's pages at ``/`` and its files at ``/static``."""
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")


__all__ = ["mount_dashboard"]
