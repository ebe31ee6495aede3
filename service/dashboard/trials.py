"""The run page's trials table: a page of trials with the invalid points left out unless
asked for.

Older simulated runs stored every point the search rejected before measuring as an
``invalid`` trial (hundreds, against a few dozen measured); the table hides them by
default. ``GET /v1/runs/{id}/trials`` filters by one status only, so the "all but
invalid" page is read here, in the order that route sorts by.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.db.models import TrialModel

#: The status of a point rejected before measurement.
INVALID = "invalid"


def trials_page(
    session: Session,
    *,
    run_id: int,
    status: str | None,
    show_invalid: bool,
    order: str,
    limit: int,
    offset: int,
) -> tuple[list[TrialModel], int]:
    """A page of the run's trials in ``order`` (a column, ``-`` for descending; trials
    without a latency last, ties in trial order) and how many match.

    ``status`` picks one status; without it every status but ``invalid`` is listed, and
    ``invalid`` too when ``show_invalid``.
    """
    query = select(TrialModel).where(TrialModel.run_id == run_id)
    if status is not None:
        query = query.where(TrialModel.status == status)
    elif not show_invalid:
        query = query.where(TrialModel.status != INVALID)
    count = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    name = order.lstrip("-")
    column = getattr(TrialModel, name)
    keys: list[Any] = [TrialModel.latency_us.is_(None)] if name == "latency_us" else []
    keys.append(column.desc() if order.startswith("-") else column.asc())
    if name != "number":
        keys.append(TrialModel.number)
    rows = session.scalars(query.order_by(*keys).limit(limit).offset(offset))
    return list(rows), count
