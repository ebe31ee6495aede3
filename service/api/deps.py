"""Dependencies of the route handlers, as ``Annotated`` aliases."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from service.core.config import Settings
from service.core.db import Database
from service.core.metrics import Metrics
from service.db.repositories import session_scope
from service.runs.events import EventHub
from service.runs.executors import ExecutorRegistry
from service.runs.insights import Insights
from service.runs.manager import RunManager


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_db(request: Request) -> Database:
    return request.app.state.db


def get_session(request: Request) -> Iterator[Session]:
    """A read session (writes go through the run manager's own sessions)."""
    with session_scope(request.app.state.db.read_sessions) as session:
        yield session


def get_run_manager(request: Request) -> RunManager:
    return request.app.state.run_manager


def get_executors(request: Request) -> ExecutorRegistry:
    return request.app.state.executors


def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


def get_insights(request: Request) -> Insights:
    return request.app.state.insights


def get_event_hub(request: Request) -> EventHub:
    return request.app.state.events


SettingsDep = Annotated[Settings, Depends(get_settings)]
DatabaseDep = Annotated[Database, Depends(get_db)]
SessionDep = Annotated[Session, Depends(get_session)]
RunManagerDep = Annotated[RunManager, Depends(get_run_manager)]
ExecutorDep = Annotated[ExecutorRegistry, Depends(get_executors)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
InsightsDep = Annotated[Insights, Depends(get_insights)]
EventHubDep = Annotated[EventHub, Depends(get_event_hub)]
