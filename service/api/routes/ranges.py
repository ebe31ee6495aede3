"""Tuned ranges (``docs/dynamic.md``): the bucket tables range runs stored, each as a table
and as the RangeArtifact a caller loads (``pipetune.load``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import JSONResponse

from scheduler_search.ops import OPERATORS
from service.api.deps import DatabaseDep
from service.db import ranges as ranges_repo
from service.db import repositories as repo
from service.errors import InvalidRequest, NotFound
from service.runs.devices import device_filter_error
from service.runs.ranges import range_artifact
from service.schemas import ErrorPublic, RangeTablePublic, RangeTablesPublic

router = APIRouter(prefix="/ranges", tags=["ranges"])

TableId = Annotated[int, Path(ge=1, le=repo.MAX_DB_INT, description="The range table's id.")]
_NOT_FOUND = {404: {"model": ErrorPublic, "description": "No such range table."}}


def _query_error(field: str, msg: str) -> InvalidRequest:
    return InvalidRequest([{"loc": (field,), "msg": msg, "type": "value_error"}], where="query")


@router.get("", response_model=RangeTablesPublic, responses={422: {"model": ErrorPublic}})
def list_ranges(
    db: DatabaseDep,
    op: Annotated[str | None, Query(max_length=64)] = None,
    device: Annotated[str | None, Query(
        max_length=64, description="A device name (sim:h200, cuda:0) or key.")] = None,
    run_id: Annotated[int | None, Query(ge=1, le=repo.MAX_DB_INT,
                                        description="The range run that stored it.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=repo.MAX_DB_INT)] = 0,
) -> RangeTablesPublic:
    """Tuned ranges, newest first (each bucket without its sProgram: ``GET
    /v1/ranges/{id}`` has it)."""
    if op is not None and op not in OPERATORS:
        raise _query_error("op", f"unknown operator {op!r}; known: {', '.join(sorted(OPERATORS))}")
    problem = device_filter_error(device) if device is not None else None
    if problem is not None:
        raise _query_error("device", problem)
    with repo.session_scope(db.read_sessions) as session:
        rows, count = ranges_repo.list_range_tables(session, op=op, device=device,
                                                    run_id=run_id, limit=limit, offset=offset)
        return RangeTablesPublic(data=[RangeTablePublic.of(r, with_schedules=False)
                                       for r in rows], count=count)


@router.get("/{table_id}", response_model=RangeTablePublic, responses=_NOT_FOUND)
def get_range(db: DatabaseDep, table_id: TableId) -> RangeTablePublic:
    """A tuned range: its buckets, each with its schedule, kernel hash and latencies."""
    with repo.session_scope(db.read_sessions) as session:
        row = ranges_repo.get_range_table(session, table_id=table_id)
        if row is None:
            raise NotFound(f"range table {table_id} not found")
        return RangeTablePublic.of(row)


@router.get(
    "/{table_id}/artifact",
    response_model=dict[str, Any],
    responses={404: {"model": ErrorPublic, "description": "No such range table, or one "
                     "whose buckets have no kernels (an operator without code generation)."}},
)
def get_range_artifact(db: DatabaseDep, table_id: TableId) -> JSONResponse:
    """The RangeArtifact JSON: each bucket's full KernelArtifact (a kernel taking the size
    at run time), the dimension, where a call's size is read (``size_from``) and the sizes
    the run sampled; ``pipetune.load`` runs it."""
    with repo.session_scope(db.read_sessions) as session:
        row = ranges_repo.get_range_table(session, table_id=table_id)
        if row is None:
            raise NotFound(f"range table {table_id} not found")
        artifact = range_artifact(session, row)
    if artifact is None:
        raise NotFound(f"range table {table_id} has no kernels (no code generation for "
                       f"{row.op}); its schedules are in GET /v1/ranges/{table_id}")
    return JSONResponse(artifact.to_dict())
