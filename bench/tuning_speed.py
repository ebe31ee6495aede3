"""Tuning speed on one GPU, from an empty cache: how long until the best-so-far kernel is
within 2% of the run's final best, and how fast that best is against the vendor peer
(cuBLAS for GEMM, cuDNN's SDPA for attention, mamba_ssm's Triton kernels for Mamba2, found
on ``PYTHONPATH``; without them the run has no baseline and ``peer_us`` is null).

Cases are ``op:shape``: ``gemm:MxNxK``, ``attention:BxHxKVxSxD`` with ``c`` at the end
for a causal mask and ``-bhsd`` after it for PyTorch's layout (``attention:1x32x8x4096x128c``,
``attention:8x32x8x512x128-bhsd``; FlashAttention's bshd without it; ``attention_backward``
takes the same shapes), or
``mamba2_chunk_scan:BxSxHxPxNxC`` and ``mamba2_chunk_state:BxSxHxPxNxC`` (batch, seqlen,
nheads, headdim, dstate, chunk_size) with ``gG`` at the end for G groups (1 without it):
``mamba2_chunk_scan:8x4096x80x64x128x256``; ``mamba2_ssd:BxSxHxPxNxC[gG]`` is the whole SSD
forward, a pipeline: its kernels tuned one after the other, the budget split between them,
and its curve the cheapest plan of each kernel's best so far (:func:`tune_pipeline`).
For each case, a fresh database and a fresh data directory (no cached schedule, no
compiled kernel, no calibration) and a fresh ``LocalGpuPool``: the run goes through the
service's own path (``RunManager.run_inline``, as ``pipetune tune`` does) with a time
budget (``--seconds``, the search loop; the final re-timing comes after). t = 0 is the
request: the pool's start counts, unless ``--warm`` (a warm ``serve``: the pool started and
warmed before the request, as a run manager does when it starts; ``warm_up_s`` says how
long that took). Each stored trial's time is when its batch's results came back.

Two readings of "within 2% of the final best":

- ``curve``: the best-so-far of the search's own (quick) timings against the best of them
  all at the end: the convergence curve, same measurements throughout.
- ``retimed``: every kernel that was ever the best-so-far is re-timed after the run,
  interleaved with the winner, by the final timing method; the first whose re-timed
  latency is within 2% of the winner's. Quick timings can be off by a few percent, so
  this is the stricter, fairer one.

``winner_found_s`` is when the kernel the run ends with was first measured: the quick
timing may rank it below another until the leaders' re-timing (by the final method, as
the search goes) puts it first, so it can come before the re-timed reading's step.

The final best against the peer is the run's own comparison: the finalists and the peer
re-timed interleaved in the same worker (warm-up, L2 flush, CUDA events, median).

    PYTHONPATH=. python3 bench/tuning_speed.py --seconds 60 \\
        --cases gemm:4096x4096x4096 attention:1x32x8x4096x128c \\
        --out bench/results/tuning_speed-2026-11-29.json
    PYTHONPATH=.:.peers python3 bench/tuning_speed.py --seconds 60 \\
        --cases mamba2_chunk_scan:8x4096x80x64x128x256 --out bench/results/tuning_speed-mamba2.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_CASES = ("gemm:4096x4096x4096", "gemm:8192x8192x8192", "gemm:4000x6000x2000",
                 "attention:1x32x8x4096x128c")
WITHIN = 1.02


def _first_within(points: list[tuple[float, float]], best: float) -> float | None:
    """The first time at which the latency is within WITHIN of ``best``."""
    for t, latency in points:
        if latency <= best * WITHIN:
            return t
    return None


def case_params(case: str, dtype: str, layout: str) -> tuple[str, dict[str, Any]]:
    """``op:shape`` to the operator and its spec's parameters."""
    op, _, shape = case.partition(":")
    if op == "gemm":
        m, n, k = (int(x) for x in shape.split("x"))
        return op, {"m": m, "n": n, "k": k, "dtype": dtype, "b_layout": layout}
    if op in ("attention", "attention_backward"):
        dims, _, tensor_layout = shape.partition("-")
        if tensor_layout not in ("", "bshd", "bhsd"):
            raise ValueError(f"{case}: the layout after '-' is bshd or bhsd")
        causal = dims.endswith("c")
        batch, heads, kv_heads, seq, head_dim = (int(x) for x in dims.rstrip("c").split("x"))
        return op, {"batch": batch, "heads": heads, "kv_heads": kv_heads, "seq_q": seq,
                    "seq_kv": seq, "head_dim": head_dim, "causal": causal, "dtype": dtype,
                    **({"layout": tensor_layout} if tensor_layout else {})}
    if op in ("mamba2_chunk_scan", "mamba2_chunk_state", "mamba2_ssd"):
        dims, _, groups = shape.partition("g")
        batch, seqlen, nheads, headdim, dstate, chunk = (int(x) for x in dims.split("x"))
        return op, {"batch": batch, "seqlen": seqlen, "nheads": nheads, "headdim": headdim,
                    "dstate": dstate, "ngroups": int(groups or 1), "chunk_size": chunk,
                    "dtype": dtype}
    raise ValueError(f"{case}: expected gemm:MxNxK, attention[_backward]:BxHxKVxSxD[c][-bhsd] or "
                     f"mamba2_chunk_scan|mamba2_chunk_state|mamba2_ssd:BxSxHxPxNxC[gG]")


def _best_so_far(rows: list[tuple], wall0: datetime.datetime) -> tuple[list, list[dict]]:
    """The search's best-so-far curve ``(t_s, latency_us)`` from the request, and its
    steps (each new best with its schedule)."""
    points, steps, best = [], [], None
    for created, status, latency, digest, choices, source in rows:
        if status != "ok" or latency is None:
            continue
        created = created if created.tzinfo else created.replace(tzinfo=datetime.UTC)
        t = (created - wall0).total_seconds()
        if best is None or latency < best:
            best = latency
            points.append((round(t, 3), latency))
            steps.append({"t_s": round(t, 3), "search_latency_us": latency,
                          "schedule_hash": digest, "choices": choices, "source": source})
    return points, steps


#: The choices a trial's row in the results keeps (enough to tell the schedules apart).
_TRIAL_KNOBS = ("tile_m", "tile_n", "tile_k", "stages_ab", "swap_ab", "stream_k",
                "cluster_size", "persistent")


def _trial_rows(rows: list[tuple], wall0: datetime.datetime) -> list[list[Any]]:
    """Every trial as ``[t_s, source, status, latency_us, {knob: value}]``, in time order:
    which seeds a round measured, and what each cost."""
    trials = []
    for created, status, latency, _, choices, source in rows:
        created = created if created.tzinfo else created.replace(tzinfo=datetime.UTC)
        knobs = {k: choices[k] for k in _TRIAL_KNOBS if choices and k in choices}
        trials.append([round((created - wall0).total_seconds(), 3), source, status, latency,
                       knobs])
    return sorted(trials, key=lambda t: t[0])


def _first_measured(rows: list[tuple], digest: str, wall0: datetime.datetime) -> float | None:
    """Seconds from the request until the kernel ``digest`` was first measured correct."""
    times = [(created if created.tzinfo else created.replace(tzinfo=datetime.UTC)) - wall0
             for created, status, latency, row_digest, _, _ in rows
             if row_digest == digest and status == "ok" and latency is not None]
    return round(min(times).total_seconds(), 3) if times else None


def _retime_steps(steps: list[dict], rows: list[tuple], winner: str, tune: Any, op: str,
                  params: dict[str, Any], seed: int, executor: Any) -> float | None:
    """Re-time every best-so-far kernel with the winner, interleaved, with the final
    timing; each step gains ``retimed_us``; the winner's re-timed latency."""
    from scheduler_search.ops import parse_spec
    from scheduler_search.search import FINAL_TIMING
    from service.runs.jobs import kernel_job
    from service.runs.space import schedule_space

    spec, model = parse_spec(op, params), tune.device.model
    workload = {"op": op, "params": params}
    space = schedule_space(spec, model)
    jobs, hashes = [], []
    for step in steps:
        sprogram, validity = space.build(step["choices"])
        if validity.ok and sprogram.hash == step["schedule_hash"]:
            jobs.append(kernel_job(sprogram, spec, model, workload, seed, FINAL_TIMING))
            hashes.append(sprogram.hash)
    if winner not in hashes:
        row = next(r for r in rows if r[3] == winner)
        sprogram, _ = space.build(row[4])
        jobs.append(kernel_job(sprogram, spec, model, workload, seed, FINAL_TIMING))
        hashes.append(sprogram.hash)
    retimed = executor.retime_interleaved(jobs, rounds=3) if jobs else []
    by_hash = {h: r.latency_us for h, r in zip(hashes, retimed, strict=True)
               if r.status.value == "ok"}
    for step in steps:
        step["retimed_us"] = by_hash.get(step["schedule_hash"])
    return by_hash.get(winner)


def _run_and_read(manager: Any, db: Any, tune: Any, rounds: list) -> tuple[Any, list, float,
                                                                         datetime.datetime]:
    """Submit ``tune``, run it in this thread (progress into ``rounds``), and read its
    trials; the run, its trial rows, its wall time and the request's wall clock."""
    from service.db import repositories as repo

    t0 = time.monotonic()

    def on_progress(progress: Any) -> None:
        rounds.append((time.monotonic() - t0, progress.trials_done, progress.best_latency_us))

    wall0 = datetime.datetime.now(datetime.UTC)
    submitted = manager.submit(tune)
    assert submitted.run is not None, "the database was not empty"
    run = manager.run_inline(submitted.run.id, on_progress)
    wall_s = time.monotonic() - t0
    assert run is not None
    with repo.session_scope(db.sessions) as session:
        trials, _ = repo.list_trials(session, run_id=run.id, limit=1_000_000)
        rows = [(t.created_at, t.status, t.latency_us, t.schedule_hash, t.choices, t.source)
                for t in trials]
    return run, rows, wall_s, wall0


@contextmanager
def _fresh_service() -> Iterator[tuple[Any, Any, Any, Any]]:
    """Settings, database, executors and run manager of an empty cache of their own (a
    fresh database and data directory: no schedule, no compiled kernel, no calibration)."""
    from service.core.config import Settings
    from service.core.db import Database
    from service.db import schema
    from service.main import quiet_optuna
    from service.runs.executors import ExecutorRegistry
    from service.runs.manager import RunManager

    quiet_optuna()
    workdir = Path(tempfile.mkdtemp(prefix="pipetune-speed-"))
    settings = Settings(database_url=f"sqlite:///{workdir / 'pipetune.db'}", data_dir=workdir)
    db = Database(settings.database_url)
    schema.migrate(db)
    executors = ExecutorRegistry.from_settings(settings)
    try:
        yield settings, db, executors, RunManager(db, settings, executors)
    finally:
        executors.close()
        db.dispose()


def tune_one(case: str, seconds: float, dtype: str, layout: str,
             warm: bool = False) -> dict[str, Any]:
    """Tune ``case`` from an empty database for ``seconds`` on this GPU (its pool warmed
    first with ``warm``); the best-so-far curve, its steps re-timed with the winner, and
    the run."""
    from service.runs.tune import prepare
    from service.schemas import RunPublic, TuneRequest

    op, params = case_params(case, dtype, layout)
    if op == "mamba2_ssd":
        return tune_pipeline(case, params, seconds, warm)
    rounds: list[tuple[float, int, float | None]] = []
    with _fresh_service() as (settings, db, executors, manager):
        request = TuneRequest(op=op, params=params, device="auto",
                              budget={"seconds": seconds})
        tune = prepare(request, settings)
        warm_up_s = None
        if warm:
            started = time.monotonic()
            executors.warm(tune.device)
            warm_up_s = round(time.monotonic() - started, 2)
        run, rows, wall_s, wall0 = _run_and_read(manager, db, tune, rounds)
        public = RunPublic.of(run).model_dump(mode="json")
        if public["status"] != "succeeded":
            return {"shape": case, "params": params, "error": public["error"], "run": public}
        points, steps = _best_so_far(rows, wall0)
        winner = public["best"]["schedule_hash"]
        winner_found_s = _first_measured(rows, winner, wall0)
        winner_retimed = _retime_steps(steps, rows, winner, tune, op, params, run.seed,
                                       executors.get(tune.device))
        retimed_points = [(s["t_s"], s["retimed_us"]) for s in steps if s["retimed_us"]]
        search_best = points[-1][1]
        return {
            "shape": case,
            "params": params,
            "seconds_budget": seconds,
            "serve": "warm" if warm else "cold",
            "warm_up_s": warm_up_s,
            "wall_s": round(wall_s, 2),
            "first_result_s": points[0][0] if points else None,
            "time_to_2pct_curve_s": _first_within(points, search_best),
            "time_to_2pct_retimed_s": (
                _first_within(retimed_points, winner_retimed) if winner_retimed else None
            ),
            "winner_found_s": winner_found_s,
            "search_best_us": search_best,
            "final_best_us": public["best"]["latency_us"],
            "peer": public["baseline"],
            "peer_us": public["baseline_latency_us"],
            "speedup_vs_peer": public["speedup_vs_baseline"],
            "winner_retimed_after_run_us": winner_retimed,
            "trials_measured": sum(1 for r in rows if r[1] not in ("invalid",)),
            "trials_ok": sum(1 for r in rows if r[1] == "ok"),
            "trials_invalid": public["invalid"],
            "stop_reason": public["stop_reason"],
            "kernel_hash": public["best"]["kernel_hash"],
            "winner": winner,
            "winner_choices": next(r[4] for r in rows if r[3] == winner),
            "best_so_far_curve": points,
            "best_so_far_steps": steps,
            "rounds": [(round(t, 3), done, lat) for t, done, lat in rounds],
            "trials": _trial_rows(rows, wall0),
            "run": public,
        }


def tune_pipeline(case: str, params: dict[str, Any], seconds: float,
                  warm: bool = False) -> dict[str, Any]:
    """A pipeline (``mamba2_ssd``) from an empty cache, as ``pipetune.tune`` runs it: each
    kernel's run in turn, the budget split between them; the pipeline's best-so-far curve
    (:func:`pipeline_curve`) from the request on."""
    from service.runs.tune import prepare_any
    from service.schemas import RunPublic, TuneRequest

    with _fresh_service() as (settings, db, executors, manager):
        request = TuneRequest(op="mamba2_ssd", params=params, device="auto",
                              budget={"seconds": seconds})
        tune = prepare_any(request, settings)
        warm_up_s = None
        if warm:
            started = time.monotonic()
            executors.warm(next(iter(tune.kernels.values())).device)
            warm_up_s = round(time.monotonic() - started, 2)
        wall0 = datetime.datetime.now(datetime.UTC)
        kernels: dict[str, dict[str, Any]] = {}
        for role, kernel in tune.kernels.items():
            run, rows, wall_s, _ = _run_and_read(manager, db, kernel, [])
            public = RunPublic.of(run).model_dump(mode="json")
            kernels[role] = {
                "op": kernel.spec.op, "params": kernel.spec.params(), "wall_s": round(wall_s, 2),
                "best_so_far_curve": _best_so_far(rows, wall0)[0],
                "final_best_us": (public["best"] or {}).get("latency_us"),
                "peer": public["baseline"], "peer_us": public["baseline_latency_us"],
                "speedup_vs_peer": public["speedup_vs_baseline"], "error": public["error"],
                "run": public}
    curve = pipeline_curve(tune.spec, kernels)
    final = {role: {"latency_us": k["final_best_us"], "baseline_latency_us": k["peer_us"]}
             for role, k in kernels.items() if k["final_best_us"] is not None}
    plan = tune.spec.best_plan(final)
    cost = tune.spec.plan_latency_us(plan, final) if plan is not None else None
    # Upstream's kernels the served kernels stand for: the chunk state with the state
    # passing, and the product writing cb with the scan (the in-tile scan's peer).
    peers = [kernels[role]["peer_us"] for role in ("state", "scan_in_tile") if role in kernels]
    peers_us = sum(peers) if peers and None not in peers else None
    return {
        "shape": case, "params": params, "seconds_budget": seconds,
        "serve": "warm" if warm else "cold", "warm_up_s": warm_up_s,
        "first_result_s": curve[0][0] if curve else None,
        "time_to_2pct_curve_s": _first_within([(t, c) for t, c, _ in curve], curve[-1][1])
        if curve else None,
        "search_best_us": curve[-1][1] if curve else None,
        "final_plan": plan, "final_best_us": cost, "peers_us": peers_us,
        "speedup_vs_peers": peers_us / cost if peers_us and cost else None,
        "best_so_far_curve": curve, "kernels": kernels,
    }


def pipeline_curve(spec: Any, kernels: dict[str, dict[str, Any]]
                   ) -> list[tuple[float, float, str]]:
    """The pipeline's best-so-far ``(t_s, latency_us, plan)``: at each time one of its
    kernels found a new best, its cheapest plan with each kernel's best so far (a plan
    counts once every kernel of it has a result; the ``cb`` plan's product priced by the
    peers, which the runs time at their end)."""
    times = sorted({t for k in kernels.values() for t, _ in k["best_so_far_curve"]})
    curve: list[tuple[float, float, str]] = []
    for now in times:
        figures = {}
        for role, kernel in kernels.items():
            seen = [latency for t, latency in kernel["best_so_far_curve"] if t <= now]
            if seen:
                figures[role] = {"latency_us": seen[-1], "baseline_latency_us": kernel["peer_us"]}
        costs = {plan: cost for plan, cost in spec.plan_latencies_us(figures).items()
                 if cost is not None}
        if costs:
            plan = min(costs, key=costs.__getitem__)
            if not curve or costs[plan] < curve[-1][1]:
                curve.append((now, costs[plan], plan))
    return curve


def main(argv: list[str] | None = None, fingerprint: dict[str, Any] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(DEFAULT_CASES))
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--layout", default="kn")
    parser.add_argument("--warm", action="store_true",
                        help="start and warm the GPU pool before the request (a warm serve)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "tuning_speed.json"))
    args = parser.parse_args(argv)
    if fingerprint is None:
        from codegen import codegen_version
        from workers import read_fingerprint

        fingerprint = read_fingerprint(0, codegen_version())
    # A copy of the tree without .git (a lent GPU machine) says so instead of a commit.
    commit = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()
    doc: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "suite": "tuning_speed",
        "commit": commit or None,
        "fingerprint": fingerprint,
        "within": WITHIN,
        "method": __doc__,
        "cases": [],
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for name in args.cases:
        started = time.monotonic()
        try:
            case = tune_one(name, args.seconds, args.dtype, args.layout, args.warm)
        except Exception as exc:  # one case's failure must not lose the others
            import traceback

            case = {"shape": name, "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc()[-3000:]}
        case["bench_wall_s"] = round(time.monotonic() - started, 1)
        doc["cases"].append(case)
        out.write_text(json.dumps(doc, indent=1, default=str))
        print(json.dumps({k: v for k, v in case.items()
                          if k not in ("best_so_far_steps", "rounds", "run", "best_so_far_curve",
                                       "winner_choices", "traceback", "trials", "kernels")}),
              flush=True)
        if "traceback" in case:
            print(case["traceback"], flush=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
