"""Tuning in this process, as users of Triton's autotuner expect: no server to start.

    import pipetune

    result = pipetune.tune("gemm", m=4096, n=4096, k=4096, dtype="float16",
                           budget={"seconds": 60})
    gemm = pipetune.load(result.kernel)

It is what ``pipetune tune`` runs (same search, same database, so the result is cached
for a server on that database too) and answers as :meth:`pipetune.Client.tune` does, with
the kernel's artifact attached; bad arguments raise :class:`pipetune.BadRequest` naming
the field.

A GEMM's ``m`` may be a range (``m={"min": 1, "max": 16384}``) or a list of sizes: a range
run, whose result's ``range`` is the bucket table and ``kernel`` the RangeArtifact JSON,
one kernel per bucket taking m at run time (``pipetune.load(result.kernel)(a, b)`` picks
the bucket of each call's m; docs/dynamic.md).
"""

from __future__ import annotations

from typing import Any

from pipetune.errors import BadRequest
from pipetune.results import TuneResult


def tune(
    op: str,
    *,
    device: str = "auto",
    budget: dict[str, Any] | None = None,
    force: bool = False,
    extend: bool = False,
    database_url: str | None = None,
    progress: bool = True,
    **params: Any,
) -> TuneResult:
    """Tune ``op`` at ``params`` on ``device`` in this process (or answer from the cache).

    Args:
        op: ``gemm``, ``attention``, ``attention_backward``, ``mamba2_chunk_state``,
            ``mamba2_chunk_scan``, or the pipeline ``mamba2_ssd`` (each of its kernels
            tuned in turn, the budget split between them; the result's ``pipeline`` and
            ``kernels``).
        device: ``auto`` (GPU 0, else the simulated H200), ``cuda:N`` or ``sim:h200``...
        budget: ``{"trials": N}`` and/or ``{"seconds": S}``.
        force: tune even if the cache holds the workload.
        extend: continue the workload's newest run with ``budget`` more.
        database_url: the SQLAlchemy URL of the cache (default: the user's data dir, or
            ``PIPETUNE_DATABASE_URL``).
        progress: draw a progress bar on stderr while the run goes.
        **params: the operator's fields (``m=4096, n=4096, k=4096, dtype="float16"``);
            a range run's dimension as ``{"min": 1, "max": 16384}`` or a list of sizes.

    Raises:
        BadRequest: a wrong operator, field, device or budget (``.field`` names it).
    """
    from pydantic import ValidationError

    from service.errors import InvalidRequest, error_item
    from service.runs.in_process import tune_in_process
    from service.schemas import TuneRequest

    try:
        request = TuneRequest(op=op, params=params, device=device, budget=budget or {},
                              force=force, extend=extend)
    except ValidationError as error:
        raise BadRequest(422, [error_item(("body", *e["loc"]), e["msg"], e["type"])
                               for e in error.errors()]) from error
    try:
        answer = tune_in_process(request, database_url, progress=progress)
    except InvalidRequest as error:
        raise BadRequest(422, [error_item((error.where, *e["loc"]), e["msg"], e["type"])
                               for e in error.errors]) from error
    return TuneResult(
        cached=answer.cached,
        schedule=answer.schedule.model_dump(mode="json") if answer.schedule else None,
        run=answer.run.model_dump(mode="json") if answer.run else None,
        kernel=answer.kernel,
        range=answer.range.model_dump(mode="json") if answer.range else None,
        pipeline=answer.pipeline.model_dump(mode="json") if answer.pipeline else None,
        kernels=answer.kernels,
    )
