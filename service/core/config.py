"""Settings: the only place in pipetune that reads the environment (prefix ``PIPETUNE_``).

Example:
    PIPETUNE_DATABASE_URL=postgresql+psycopg://pipetune@db/pipetune pipetune serve
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from platformdirs import user_data_dir
from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

APP_NAME = "pipetune"


def default_data_dir() -> Path:
    """The user's data directory for pipetune (``~/.local/share/pipetune`` on Linux)."""
    return Path(user_data_dir(APP_NAME, appauthor=False))


class Settings(BaseSettings):
    """Service settings, from ``PIPETUNE_*`` environment variables or keyword arguments.

    Attributes:
        database_url: SQLAlchemy URL; default a SQLite file in ``data_dir``. PostgreSQL
            URLs are normalised to the psycopg 3 driver.
        database_url_file: a file holding the URL (a password in a command line shows
            in ``ps``; a file or the environment does not); used when ``database_url``
            is not given.
        data_dir: where the default database and the compiled-kernel cache (``cubin/``)
            live.
        max_concurrent_runs: tuning runs executed at the same time by one process.
        simulated_capacity: batch width of the simulated device.
        on_restart: what happens to runs left ``running`` by a dead process: ``resume``
            them, or mark them ``interrupted``.
        stale_after_s: a running run whose owner has not written a heartbeat for this
            long is taken as orphaned (another host's process may own it otherwise).
        heartbeat_s: how often a running run's owner writes its heartbeat (at most a
            third of ``stale_after_s``: a shorter stale period shortens it).
        default_trials, max_trials, max_seconds: request budget default and this server's
            limits (a larger budget is refused with a 422 naming it; within the schema's
            absolute bounds of 10,000 trials and a day).
        default_patience: stop a run after this many measured trials without improvement
            (0: never).
        seed: the search's seed (runs are reproducible for the same seed).
        warm_start: how many nearest cached schedules seed a new run.
        gpu_batch_size: candidates per search round on a GPU (0: one per CPU core, so a
            round's kernels compile together).
        warm_executors: start the executors of the GPUs (and fleet kinds) a run manager
            serves when it starts (worker processes, CUDA contexts, compile pools) and
            warm them with a small GEMM kernel and its baseline per 16-bit type, so the
            first run after a restart does not wait for them.
        local_pool_idle_s: in-process tunes (``pipetune.tune``, ``pipetune tune``) share
            their GPU workers and compile processes; they stop this long after the last
            tune ends (0: when each tune ends), so the next tune starts warm.
        cost_model_seeds: on a GPU, the cost model's best distinct structures measured
            first (computed in another process while the search starts; 0: off).
        calibrate: fit the cost model to each GPU run's measurements and rank later runs
            on that device with it.
        api_threads: threads that serve the API's blocking handlers; requests beyond
            them wait their turn, and the database pools are sized from it.
        max_event_streams: open ``/v1/runs/{id}/events`` streams (429 beyond).
        max_header_bytes: largest request head (request line and headers) ``serve``
            reads; a longer one is answered 431 before it is read whole.
        max_headers: most header fields in a request (431 beyond).
        require_auth: every API request needs an API key (``pipetune keys create``);
            ``pipetune serve`` turns it on whenever it binds a non-loopback address.
        rate_limit: requests per API key, in the ``limits`` notation (``600/minute``);
            beyond it a 429 with ``Retry-After``.
        auth_failure_limit: failed API key attempts and failed dashboard logins per
            client address (``limits`` notation); beyond it every key attempt from that
            address is a 429 with ``Retry-After`` until the window moves on.
        key_cache_s: seconds a checked key (or dashboard session) is trusted without
            asking the database again (0: ask every time). A key revoked by this process
            is forgotten at once; by another process (``pipetune keys revoke``), within
            this time.
        session_ttl_s: seconds a dashboard login lasts (logout or revoking its key end
            it sooner).
        key_max_active_runs: queued plus running runs one API key may have.
        max_queued_runs: queued runs the server accepts in all (then new runs get a 429).
        db_retry_attempts, db_retry_max_wait_s: a run's database writes are tried this
            many times, waiting exponentially longer between tries (at most this long).
        max_run_attempts: a run that still cannot write is queued again (resumed from its
            trials) until it has been started this many times; then it fails.
        run_workers: ``pipetune serve`` runs searches in this many ``pipetune worker``
            processes (0: in the API's own process, in threads).
        executor: ``local`` (this host's GPUs and the simulated devices) or ``ray``: also
            the fleet's GPUs, through the Ray cluster at ``ray_address`` (the optional
            ``pipetune[fleet]`` extra; nothing imports Ray otherwise).
        ray_address: the Ray cluster's head (``host:port``; empty: ``auto``, the cluster
            this host's ``ray start`` joined).
        range_search: knobs of a range run's search (``RangeConfig``'s fields, e.g.
            ``{"sizes": 10, "samples_per_anchor": 128}``; JSON in the environment); the
            seed and batch width come from the settings above.
    """

    model_config = SettingsConfigDict(env_prefix="PIPETUNE_", extra="ignore")

    database_url: str = ""
    database_url_file: Path | None = None
    data_dir: Path = Field(default_factory=default_data_dir)
    max_concurrent_runs: int = Field(default=2, ge=1, le=64)
    simulated_capacity: int = Field(default=8, ge=1, le=256)
    on_restart: Literal["resume", "interrupt"] = "resume"
    stale_after_s: float = Field(default=60.0, gt=0)
    heartbeat_s: float = Field(default=5.0, gt=0)
    default_trials: int = Field(default=64, ge=1)
    max_trials: int = Field(default=10_000, ge=1)
    max_seconds: float = Field(default=86_400.0, gt=0)
    default_patience: int = Field(default=0, ge=0)
    seed: int = 0
    warm_start: int = Field(default=4, ge=0, le=64)
    gpu_batch_size: int = Field(default=0, ge=0, le=256)
    warm_executors: bool = True
    local_pool_idle_s: float = Field(default=60.0, ge=0, le=86_400)
    cost_model_seeds: int = Field(default=16, ge=0, le=256)
    calibrate: bool = True
    api_threads: int = Field(default=40, ge=1, le=1000)
    max_event_streams: int = Field(default=1000, ge=1, le=100_000)
    max_header_bytes: int = Field(default=32 * 1024, ge=1024, le=1024 * 1024)
    max_headers: int = Field(default=100, ge=16, le=10_000)
    require_auth: bool = False
    rate_limit: str = "600/minute"
    auth_failure_limit: str = "10/minute"
    key_cache_s: float = Field(default=1.0, ge=0, le=60)
    session_ttl_s: float = Field(default=12 * 3600, gt=0, le=30 * 86_400)
    key_max_active_runs: int = Field(default=8, ge=1)
    max_queued_runs: int = Field(default=256, ge=1)
    db_retry_attempts: int = Field(default=8, ge=1, le=100)
    db_retry_max_wait_s: float = Field(default=8.0, ge=0)
    max_run_attempts: int = Field(default=3, ge=1, le=100)
    run_workers: int = Field(default=1, ge=0, le=64)
    executor: Literal["local", "ray"] = "local"
    ray_address: str = ""
    range_search: dict[str, int | float | bool] = Field(default_factory=dict)

    @field_validator("range_search")
    @classmethod
    def _range_knobs(cls, knobs: dict[str, int | float | bool]) -> dict[str, int | float | bool]:
        from dataclasses import fields

        from scheduler_search.search.range_search import RangeConfig

        known = {f.name for f in fields(RangeConfig)} - {"seed", "batch_size"}
        unknown = sorted(set(knobs) - known)
        if unknown:
            raise ValueError(f"unknown range search knobs {unknown}; known: {sorted(known)}")
        return knobs

    @field_validator("database_url")
    @classmethod
    def _normalise_driver(cls, url: str) -> str:
        """``postgres://`` and ``postgresql://`` mean psycopg 3 here (SQLAlchemy's default
        PostgreSQL driver is psycopg2, which pipetune does not install)."""
        url = url.strip()
        for prefix in ("postgres://", "postgresql://"):
            if url.startswith(prefix):
                return "postgresql+psycopg://" + url[len(prefix) :]
        return url

    @field_validator("rate_limit", "auth_failure_limit")
    @classmethod
    def _parse_rate_limit(cls, limit: str) -> str:
        from limits import parse

        try:
            parse(limit)
        except ValueError as exc:
            raise ValueError(f"not a rate limit like '600/minute': {limit!r}") from exc
        return limit

    @model_validator(mode="after")
    def _default_database(self) -> Settings:
        if not self.database_url and self.database_url_file is not None:
            self.database_url = self._normalise_driver(self.database_url_file.read_text())
        if not self.database_url:
            self.database_url = f"sqlite:///{self.data_dir / 'pipetune.db'}"
        return self

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


def get_settings(**overrides: object) -> Settings:
    """Settings from the environment, with explicit overrides (CLI flags) on top."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})
