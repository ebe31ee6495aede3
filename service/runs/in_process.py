"""A tune in this process: one request run (or answered from the cache) against the
server's database, so its result is cached for the server too, with a progress bar while
it runs. The user package (``pipetune.tune``, ``pipetune.torch``'s cache lookups) and the
``pipetune tune`` command both call it; the command only prints what it returns.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scheduler_search.search import Progress
    from service.db.models import RunModel
    from service.runs.manager import RunManager
    from service.schemas import (
        PipelinePublic,
        RangeTablePublic,
        RunPublic,
        SchedulePublic,
        TuneRequest,
    )


@dataclass(frozen=True)
class LocalAnswer:
    """A tune answered in this process: the cached or newly stored schedule, the run that
    found it (None for an imported schedule) and the best kernel's KernelArtifact JSON.
    For a range request: ``range``, the tuned range (None when the run stored none),
    ``schedule`` None and ``kernel`` its RangeArtifact JSON (None without kernels). For a
    pipeline: ``pipeline`` and ``kernels``, ``schedule``, ``run`` and ``kernel`` None."""

    cached: bool
    schedule: SchedulePublic | None
    run: RunPublic | None
    kernel: dict[str, Any] | None
    range: RangeTablePublic | None = None
    #: A pipeline's answer (``mamba2_ssd``), and its kernels' KernelArtifact JSON by role.
    pipeline: PipelinePublic | None = None
    kernels: dict[str, dict[str, Any]] | None = None


def tune_in_process(
    request: TuneRequest, database_url: str | None, gpu_pool_factory: Any = None,
    progress: bool = True,
) -> LocalAnswer:
    """Run (or answer from the cache) one tune request in this process, against the
    database at ``database_url`` (the server's, so the result is cached for it).

    Args:
        gpu_pool_factory: makes the executor of a local GPU (tests inject stand-ins).
        progress: draw a progress bar on stderr while the run goes.

    Raises:
        InvalidRequest: the parameters or the device are wrong (each error names its field).
    """
    from service.core.config import get_settings
    from service.core.db import Database
    from service.main import quiet_optuna
    from service.runs.shared_executors import in_process_executors

    quiet_optuna()
    settings = get_settings(database_url=database_url)
    db = Database(settings.database_url)
    try:
        with in_process_executors(settings, gpu_pool_factory) as executors:
            return _tune_with(request, settings, db, executors, progress)
    finally:
        db.dispose()


def _tune_with(request: TuneRequest, settings: Any, db: Any, executors: Any,
               progress: bool) -> LocalAnswer:
    """:func:`tune_in_process` on the cache's database with the tune's executors."""
    from service.db import repositories as repo
    from service.db import schema
    from service.runs.manager import RunManager
    from service.runs.pipelines import PipelineTuneInput
    from service.runs.tune import RangeTuneInput, prepare_any
    from service.schemas import RunPublic, SchedulePublic

    schema.migrate(db)
    tune = prepare_any(request, settings)
    manager = RunManager(db, settings, executors)
    manager.recover()  # a run left `running` by a killed tune must not be waited on
    if isinstance(tune, RangeTuneInput):
        return _tune_range_in_process(manager, db, tune, progress)
    if isinstance(tune, PipelineTuneInput):
        return _tune_pipeline_in_process(manager, db, tune, progress)
    submitted = manager.submit(tune)
    if submitted.served is not None:  # an exact size a tuned range holds
        schedule = SchedulePublic.of_range(submitted.served)
        found_by = RunPublic.of(submitted.run) if submitted.run is not None else None
        return LocalAnswer(True, schedule, found_by, _kernel(db, schedule.kernel_hash))
    if submitted.schedule is not None:
        schedule = SchedulePublic.of(submitted.schedule)
        found_by = RunPublic.of(submitted.run) if submitted.run is not None else None
        return LocalAnswer(True, schedule, found_by, _kernel(db, schedule.kernel_hash))
    assert submitted.run is not None
    run_row = _follow(manager, submitted.run.id, tune.trials, progress)
    run = RunPublic.of(run_row)
    found = None
    if run.best is not None:  # succeeded, or cancelled with its best kept
        with repo.session_scope(db.sessions) as session:
            row = repo.find_schedule(session, workload_id=run_row.workload_id,
                                     device_id=run_row.device_id)
            found = SchedulePublic.of(row) if row is not None else None
    kernel = _kernel(db, found.kernel_hash) if found is not None else None
    return LocalAnswer(False, found, run, kernel)


def _tune_range_in_process(manager: RunManager, db: Any, tune: Any,
                           progress: bool) -> LocalAnswer:
    """A range request in this process: the tuned range covering it, or its range run
    executed here (or followed, if another process has it); the table and its
    RangeArtifact JSON."""
    from service.db import ranges as ranges_repo
    from service.db import repositories as repo
    from service.runs.ranges import range_artifact
    from service.schemas import RangeTablePublic, RunPublic

    submitted = manager.submit_range(tune)
    cached = submitted.range_table is not None
    run_row = submitted.run
    if not cached:
        assert run_row is not None
        run_row = _follow(manager, run_row.id, tune.trials, progress)
    with repo.session_scope(db.sessions) as session:
        table = submitted.range_table
        if table is None and run_row is not None:
            table = ranges_repo.range_table_of_run(session, run_id=run_row.id)
        artifact = range_artifact(session, table) if table is not None else None
        public = RangeTablePublic.of(table) if table is not None else None
    run = RunPublic.of(run_row) if run_row is not None else None
    return LocalAnswer(cached, None, run, artifact.to_dict() if artifact is not None else None,
                       public)


def _tune_pipeline_in_process(manager: RunManager, db: Any, tune: Any,
                              progress: bool) -> LocalAnswer:
    """A pipeline in this process: each kernel's cached schedule, or its run executed here
    (or followed, if another process has it), one kernel after the other."""
    from service.db import repositories as repo
    from service.runs.pipelines import pipeline_public
    from service.schemas import RunPublic, SchedulePublic

    parts: dict[str, tuple[Any, Any]] = {}
    kernels: dict[str, dict[str, Any]] = {}
    cached = True
    for role, kernel in tune.kernels.items():
        submitted = manager.submit(kernel)
        run_row = submitted.run
        if submitted.schedule is None:
            cached = False
            assert run_row is not None
            run_row = _follow(manager, run_row.id, kernel.trials, progress)
        with repo.session_scope(db.sessions) as session:
            row = repo.find_cached(session, workload_key=kernel.spec.workload_key(),
                                   device_key=kernel.device.key)
            schedule = SchedulePublic.of(row) if row is not None else None
        parts[role] = (RunPublic.of(run_row) if run_row is not None else None, schedule)
        artifact = _kernel(db, schedule.kernel_hash) if schedule is not None else None
        if artifact is not None:
            kernels[role] = artifact
    return LocalAnswer(cached, None, None, None, pipeline=pipeline_public(tune, parts),
                       kernels=kernels)


@contextmanager
def _cache_lookup(request: TuneRequest, database_url: str | None) -> Iterator[tuple[Any, Any]]:
    """The cache's database (migrated) and the request prepared against it, for a lookup
    that starts nothing; the database is let go after."""
    from service.core.config import get_settings
    from service.core.db import Database
    from service.db import schema
    from service.runs.tune import prepare

    settings = get_settings(database_url=database_url)
    db = Database(settings.database_url)
    try:
        schema.migrate(db)
        yield db, prepare(request, settings)
    finally:
        db.dispose()


def cached_range(request: TuneRequest, database_url: str | None = None
                 ) -> dict[str, Any] | None:
    """The RangeArtifact JSON (``RangeArtifact.to_dict()``) of a tuned range on the
    request's device that holds the request's exact params (its fixed parameters equal,
    its size in the range), or None (no such range, or one without kernels); starts
    nothing (a drop-in's lookup, before it launches ``kernel_at(size)``).

    Raises:
        InvalidRequest: the parameters or the device are wrong.
    """
    from service.db import repositories as repo
    from service.runs.ranges import covering_table, range_artifact

    with _cache_lookup(request, database_url) as (db, tune), \
            repo.session_scope(db.read_sessions) as session:
        found = covering_table(session, tune.spec, tune.device.key)
        artifact = range_artifact(session, found[1]) if found is not None else None
    return artifact.to_dict() if artifact is not None else None


def cached_kernel(request: TuneRequest, database_url: str | None) -> dict[str, Any] | None:
    """The kernel (KernelArtifact JSON) of the best schedule cached for the request's
    workload on its device, or None; starts nothing (a drop-in's lookup).

    Raises:
        InvalidRequest: the parameters or the device are wrong.
    """
    from service.db import repositories as repo

    with _cache_lookup(request, database_url) as (db, tune):
        with repo.session_scope(db.sessions) as session:
            workload = repo.find_workload(session, key=tune.spec.workload_key())
            device = repo.find_device(session, key=tune.device.key)
            if workload is None or device is None:
                return None
            row = repo.find_schedule(session, workload_id=workload.id, device_id=device.id)
            kernel_hash = row.kernel_hash if row is not None else None
        return _kernel(db, kernel_hash)


def cached_figures(request: TuneRequest, database_url: str | None) -> dict[str, Any] | None:
    """What the cache measured of the workload's best schedule on the request's device:
    ``latency_us``, ``timing_method`` and, from the run that found it, its ``baseline``
    and ``baseline_latency_us`` (None for an imported schedule or a run without a peer);
    None when nothing is cached. Starts nothing (a drop-in choosing between the kernels
    of two workloads that compute the same thing).

    Raises:
        InvalidRequest: the parameters or the device are wrong.
    """
    from service.db import repositories as repo
    from service.db.models import RunModel

    with _cache_lookup(request, database_url) as (db, tune), \
            repo.session_scope(db.read_sessions) as session:
        row = repo.find_cached(session, workload_key=tune.spec.workload_key(),
                               device_key=tune.device.key)
        if row is None or row.simulated:
            return None
        run = session.get(RunModel, row.run_id) if row.run_id is not None else None
        return {"latency_us": row.latency_us, "timing_method": row.timing_method,
                "baseline": run.baseline if run is not None else None,
                "baseline_latency_us": run.baseline_latency_us if run is not None else None}


def tune_locally(
    request: TuneRequest, database_url: str | None, gpu_pool_factory: Any = None
) -> dict[str, Any]:
    """:func:`tune_in_process`, summarised for the command line's printout and JSON."""
    answer = tune_in_process(request, database_url, gpu_pool_factory)
    summary: dict[str, Any] = {"cached": answer.cached}
    if answer.run is not None:
        summary["run"] = answer.run.model_dump(mode="json")
    if answer.pipeline is not None:
        summary["pipeline"] = answer.pipeline.model_dump(mode="json")
        summary["kernels"] = answer.kernels
        summary["latency_us"] = answer.pipeline.latency_us
    elif answer.range is not None:
        summary["range"] = answer.range.model_dump(mode="json")
        summary["kernel"] = answer.kernel
        summary["latency_us"] = None
    elif answer.schedule is not None:
        summary.update(_schedule_summary(answer.schedule))
        summary["kernel"] = answer.kernel
    else:
        summary.update(latency_us=None, error=answer.run.error if answer.run else None)
    return summary


def _follow(manager: RunManager, run_id: int, trials: int, progress: bool = True) -> RunModel:
    """Execute the run here with a progress bar (or wait for the process running it)."""
    import time

    from tqdm import tqdm

    bar = tqdm(total=trials, unit="trial", desc="tuning", file=sys.stderr, leave=True,
               disable=not progress)

    def on_progress(progress: Progress) -> None:
        bar.n = progress.trials_done
        best, reference = progress.best_latency_us, progress.reference_latency_us
        text = progress.phase
        if best:
            text += f" best {best:.2f} us"
            if reference:
                text += f" ({reference / best:.3f}x the baseline)"
        bar.set_postfix_str(f"{text} {progress.elapsed_s:.0f} s")

    try:
        run = manager.run_inline(run_id, on_progress)
        while run is not None and run.status in ("queued", "running"):
            # Another process (a server on the same database) owns it: follow its row,
            # and take the run over if that process dies. A queued run (ours, queued again
            # after a database fault, to start after its wait) is claimed again here.
            bar.n = run.trials_done
            bar.refresh()
            time.sleep(0.5)
            if run_id in manager.recover() or run.status == "queued":
                run = manager.run_inline(run_id, on_progress)
            else:
                run = manager.get(run_id)
        if run is not None:
            bar.n = run.trials_done
            bar.refresh()
    finally:
        bar.close()
    assert run is not None
    return run


def _kernel(db: Any, kernel_hash: str | None) -> dict[str, Any] | None:
    """The stored KernelArtifact of ``kernel_hash``, if any."""
    from service.db import repositories as repo

    if kernel_hash is None:
        return None
    with repo.session_scope(db.sessions) as session:
        row = repo.get_kernel(session, kernel_hash=kernel_hash)
        return dict(row.artifact) if row is not None else None


def _schedule_summary(schedule: SchedulePublic) -> dict[str, Any]:
    data = schedule.model_dump(mode="json")
    return {
        "latency_us": data["latency_us"],
        "schedule_hash": data["schedule_hash"],
        "kernel_hash": data["kernel_hash"],
        "baseline": data["baseline"],
        "baseline_latency_us": data["baseline_latency_us"],
        "speedup_vs_baseline": data["speedup_vs_baseline"],
        "timing_method": data["timing_method"],
        "simulated": data["simulated"],
        "device": data["device"],
        "workload": data["workload"],
        "choices": data["choices"],
        "schedule": data["schedule"],
        "range_id": data["range_id"],
    }
