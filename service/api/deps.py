"""Dependencies of the route handlers, as ``Annotated`` aliases.

The getters of the app's state are ``async``: FastAPI runs a plain ``def`` dependency in
its thread pool, and each such hop waits for the GIL behind the busy event loop (up to
the 5 ms switch interval), which made every request several hops slower under load.
Only the session, whose work is blocking, stays a thread-pool dependency.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from service.api.answers import AnswerMemo
from service.core.config import Settings
from service.core.db import Database
from service.core.metrics import Metrics
from service.db.repositories import session_scope
from service.runs.events import EventHub
from service.runs.executors import ExecutorRegistry
from service.runs.insights import Insights
from service.runs.manager import RunManager


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_db(request: Request) -> Database:
    return request.app.state.db


def get_session(request: Request) -> Iterator[Session]:
    """A read session (writes go through the run manager's own sessions)."""
    with session_scope(request.app.state.db.read_sessions) as session:
        yield session


async def get_run_manager(request: Request) -> RunManager:
    return request.app.state.run_manager


async def get_executors(request: Request) -> ExecutorRegistry:
    return request.app.state.executors


async def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


async def get_insights(request: Request) -> Insights:
    return request.app.state.insights


async def get_answers(request: Request) -> AnswerMemo:
    return request.app.state.answers


async def get_event_hub(request: Request) -> EventHub:
    return request.app.state.events


SettingsDep = Annotated[Settings, Depends(get_settings)]
DatabaseDep = Annotated[Database, Depends(get_db)]
SessionDep = Annotated[Session, Depends(get_session)]
RunManagerDep = Annotated[RunManager, Depends(get_run_manager)]
ExecutorDep = Annotated[ExecutorRegistry, Depends(get_executors)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
InsightsDep = Annotated[Insights, Depends(get_insights)]
EventHubDep = Annotated[EventHub, Depends(get_event_hub)]
AnswersDep = Annotated[AnswerMemo, Depends(get_answers)]
