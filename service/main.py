"""Builds the FastAPI app, and nothing else: settings, lifespan, routers, the dashboard,
middleware.

Example:
    uvicorn --factory service.main:create_app
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI
from fastapi.routing import APIRoute

from service.api import errors
from service.api.answers import AnswerMemo
from service.api.auth import install_auth
from service.api.docs import mount_api_docs
from service.api.guards import RequestGuard
from service.api.main import api_router, root_router
from service.api.request_metrics import RequestMetrics
from service.api.security_headers import SecurityHeaders
from service.core.config import Settings
from service.core.db import Database
from service.core.metrics import Metrics
from service.dashboard import mount_dashboard
from service.db import schema
from service.runs.events import EventHub
from service.runs.executors import ExecutorRegistry, GpuPoolFactory
from service.runs.insights import Insights
from service.runs.manager import RunManager

logger = logging.getLogger(__name__)

#: Largest request body accepted (a tune request is a few hundred bytes).
MAX_BODY_BYTES = 64 * 1024
#: Time allowed to receive a whole request body (a slow client is answered 408).
BODY_TIMEOUT_S = 15.0
#: Database connections beyond the API's threads: the run threads' and a few spare.
_SPARE_CONNECTIONS = 4


def quiet_optuna() -> None:
    """Optuna logs every study it creates (two per run); keep its warnings only."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


def _operation_id(route: APIRoute) -> str:
    """Stable OpenAPI operation ids: ``<tag>-<handler name>``."""
    return f"{route.tags[0]}-{route.name}" if route.tags else route.name


def create_app(
    settings: Settings | None = None,
    *,
    run_background: bool = True,
    gpu_pool_factory: GpuPoolFactory | None = None,
) -> FastAPI:
    """The pipetune API.

    On start it migrates the database (``schema.migrate``), recovers runs left by a
    dead process, and starts the run manager's threads; on stop it closes them.

    Args:
        settings: defaults to ``Settings()`` (the ``PIPETUNE_*`` environment).
        run_background: start the run manager's threads (tests may leave runs queued).
        gpu_pool_factory: makes the executor of a local GPU (tests inject stand-ins).
    """
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        quiet_optuna()
        # Every API thread can hold a connection at once: none ever waits for the pool.
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.api_threads
        app.state.gate = anyio.Semaphore(settings.api_threads)
        db = Database(settings.database_url, pool_size=settings.api_threads
                      + settings.max_concurrent_runs + _SPARE_CONNECTIONS)
        schema.migrate(db)
        db.remember_file()
        executors = ExecutorRegistry.from_settings(settings, gpu_pool_factory)
        manager = RunManager(db, settings, executors, app.state.metrics)
        app.state.db, app.state.executors, app.state.run_manager = db, executors, manager
        if run_background:
            manager.start()
        else:
            manager.recover()
        logger.info("pipetune serving with %s (%s)", db.backend, _redacted(db.url))
        try:
            async with EventHub(db, settings.max_event_streams).running() as hub:
                app.state.events = hub
                yield
        finally:
            manager.close()
            executors.close()
            db.dispose()

    app = FastAPI(
        title="pipetune",
        summary="Kernel autotuning with software-defined pipelining (sTask-graphs).",
        version="1",
        lifespan=lifespan,
        generate_unique_id_function=_operation_id,
        docs_url=None,  # served offline by mount_api_docs
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.metrics = Metrics()
    app.state.insights = Insights()
    app.state.answers = AnswerMemo()
    install_auth(app, settings)
    errors.install(app)
    app.include_router(api_router)
    app.include_router(root_router)
    mount_dashboard(app)
    mount_api_docs(app)

    app.add_middleware(RequestMetrics)
    app.add_middleware(RequestGuard, max_body=MAX_BODY_BYTES, body_timeout_s=BODY_TIMEOUT_S)
    app.add_middleware(SecurityHeaders)  # outermost: the guard's refusals get them too
    return app


def _redacted(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
