"""LocalGpuPool: one worker process per visible GPU on this machine.

A batch is handled in two stages. First every distinct kernel source is compiled in a
pool of CPU processes (NVRTC needs no GPU); compile errors are answered right away.
Then one feeder thread per GPU worker takes the next job from a shared queue, so jobs
spread over whichever workers are free, and the result lands at the job's index.

The two stages of consecutive batches overlap when the caller says what comes next:
``prepare(jobs)`` compiles a batch in a background thread (on the CPU cores) while
``measure`` times the current one on the GPUs; ``measure`` then finds the cubins ready.
Batches are as wide as the compiler's process pool (``batch_size``), so one round keeps
every core busy. Workers start in the background too: the first batch compiles while
they import CuPy.

Each worker is a child process pinned to one GPU (``workers.spawn``: a fresh interpreter
that never imports the caller's script). The feeder waits at most the job's
``deadline_s`` for its answer: past it the process is killed (a kernel that never ends
cannot be interrupted any other way) and the job is a ``timeout``. A worker that dies,
or reports a sticky CUDA error and exits, makes its job a ``crash``. Either way only that
worker is replaced, lazily, before its next job.
"""

from __future__ import annotations

import collections
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any, Protocol

from workers.compile import CompileResult, ParallelCompiler
from workers.device import arch_of
from workers.executors.base import Executor
from workers.protocol import Job, Measurement, MeasurementStatus
from workers.spawn import Child
from workers.worker import worker_main

WorkerEntry = Callable[[Connection, str, dict[str, Any]], None]
CompileRequest = tuple[str, tuple[str, ...]]
DEFAULT_STARTUP_TIMEOUT_S = 180.0
#: Batch width when the compiler does not say how many processes it runs.
DEFAULT_BATCH_SIZE = 8
#: Successful compiles a pool remembers (a few runs' worth of kernels).
COMPILED_KEPT = 4096
_STOP_GRACE_S = 5.0


class Compiler(Protocol):
    """What the pool needs from a compiler (``ParallelCompiler`` in production)."""

    def compile_many(
        self, requests: list[tuple[str, tuple[str, ...]]], default_arch: str
    ) -> list[CompileResult]: ...

    def close(self) -> None: ...


def visible_devices() -> list[str]:
    """CUDA device ids this process may use, as ``CUDA_VISIBLE_DEVICES`` entries."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip()]
    from cupy.cuda import runtime

    return [str(i) for i in range(runtime.getDeviceCount())]


class LocalGpuPool(Executor):
    """Measures jobs on this machine's GPUs, one worker process per GPU.

    Args:
        devices: ``CUDA_VISIBLE_DEVICES`` entries, one worker each (default: every
            visible GPU).
        worker_entry: the worker process's entry point; tests inject a stand-in.
        compiler: compiles kernel sources before they reach a worker (default: a
            ``ParallelCompiler`` over all CPU cores with the default cubin cache).
        codegen_version: recorded in each worker's device fingerprint.
        startup_timeout_s: how long a worker may take to import CuPy and report ready.
        batch_size: candidates per search round (default: the compiler's process count,
            at least one per GPU).

    Example:
        with LocalGpuPool() as pool:
            results = pool.measure([Job(workload, artifact=artifact)])
    """

    def __init__(
        self,
        devices: Sequence[str] | None = None,
        *,
        worker_entry: WorkerEntry = worker_main,
        compiler: Compiler | None = None,
        codegen_version: str = "",
        startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
        batch_size: int | None = None,
    ) -> None:
        devices = list(devices) if devices is not None else visible_devices()
        if not devices:
            raise RuntimeError("LocalGpuPool found no visible GPU")
        self._compiler = compiler if compiler is not None else ParallelCompiler()
        width = batch_size or getattr(self._compiler, "max_workers", None) or DEFAULT_BATCH_SIZE
        self._batch_size = max(int(width), len(devices))
        self._workers = [
            _WorkerHandle(
                slot,
                device,
                worker_entry,
                {"device_index": slot, "codegen_version": codegen_version},
                startup_timeout_s,
            )
            for slot, device in enumerate(devices)
        ]
        self._lock = threading.Lock()
        self._compile_lock = threading.Lock()
        self._prefetch_lock = threading.Lock()
        # Compiles started by ``prepare``: request -> (its batch's future, index in it).
        self._prefetched: dict[CompileRequest, tuple[Future[list[CompileResult]], int]] = {}
        # Successful compiles by request, most recent last: a kernel timed again (the
        # search's leaders, the finalists) does not go back to the compiler.
        self._compiled: collections.OrderedDict[CompileRequest, CompileResult] = (
            collections.OrderedDict())
        self._background = ThreadPoolExecutor(1, thread_name_prefix="pipetune-compile")
        self._startup = threading.Thread(
            target=self._start_all, name="pipetune-gpu-startup", daemon=True
        )
        self._startup.start()

    def capacity(self) -> int:
        return len(self._workers)

    def batch_size(self) -> int:
        return self._batch_size

    def warm(self, jobs: Sequence[Job] = ()) -> None:
        """Wait for the workers' start (CUDA initialised, fingerprints read), start the
        compiler's processes, and measure ``jobs`` once (results dropped; see
        :meth:`Executor.warm`; the service's pools have one worker, which sees them all)."""
        self._startup.join()
        warm_compiler = getattr(self._compiler, "warm", None)
        if warm_compiler is not None:
            warm_compiler()
        if jobs:
            self.measure(jobs)

    @property
    def fingerprints(self) -> list[dict[str, Any] | None]:
        """Each worker's device fingerprint, as reported at its last start."""
        self._startup.join()
        return [w.fingerprint for w in self._workers]

    def prepare(self, jobs: Sequence[Job]) -> None:
        """Compile the artifacts of ``jobs`` in the background (see the module docstring)."""
        requests = [_request(job) for job in jobs if job.artifact is not None]
        with self._prefetch_lock:
            new = [r for r in dict.fromkeys(requests) if r not in self._prefetched]
            if not new:
                return
            future = self._background.submit(self._compile_requests, new)
            for index, request in enumerate(new):
                self._prefetched[request] = (future, index)

    def measure(self, jobs: Sequence[Job]) -> list[Measurement]:
        self._startup.join()
        with self._lock:
            self._start_all()
            results: list[Measurement | None] = [None] * len(jobs)
            compiled = self._compile(jobs, results)
            todo: queue.SimpleQueue[int] = queue.SimpleQueue()
            for index, result in enumerate(results):
                if result is None:
                    todo.put(index)

            def feed(worker: _WorkerHandle) -> None:
                while True:
                    try:
                        index = todo.get_nowait()
                    except queue.Empty:
                        return
                    results[index] = worker.run(jobs[index], compiled.get(index))

            threads = [threading.Thread(target=feed, args=(w,), daemon=True) for w in self._workers]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert all(r is not None for r in results)
            return results  # type: ignore[return-value]

    def close(self) -> None:
        self._startup.join()
        self._background.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            for worker in self._workers:
                worker.stop()
            with self._compile_lock:
                self._compiler.close()

    def _start_all(self) -> None:
        """(Re)start every worker that is down, in parallel (each imports CuPy)."""
        down = [w for w in self._workers if not w.alive]
        threads = [threading.Thread(target=w.ensure_started, daemon=True) for w in down]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _arch(self) -> str:
        """The NVRTC architecture of the first started worker ("90" before any is up);
        generated artifacts name theirs in their compile options anyway."""
        fingerprint = next((w.fingerprint for w in self._workers if w.fingerprint), None)
        return arch_of(fingerprint) if fingerprint is not None else "90"

    def _compile_requests(self, requests: list[CompileRequest]) -> list[CompileResult]:
        with self._compile_lock:
            return self._compiler.compile_many(requests, self._arch())

    def _remember_compiles(self, outcomes: dict[CompileRequest, CompileResult]) -> None:
        with self._prefetch_lock:
            for request, outcome in outcomes.items():
                if outcome.ok:
                    self._compiled[request] = outcome
                    self._compiled.move_to_end(request)
            while len(self._compiled) > COMPILED_KEPT:
                self._compiled.popitem(last=False)

    def _compile(
        self, jobs: Sequence[Job], results: list[Measurement | None]
    ) -> dict[int, CompileResult]:
        """Compile every artifact job (or collect what ``prepare`` compiled); failed
        compiles become results right away."""
        indices = [i for i, job in enumerate(jobs) if job.artifact is not None]
        if not indices:
            return {}
        requests = {i: _request(jobs[i]) for i in indices}
        outcomes: dict[CompileRequest, CompileResult] = {}
        with self._prefetch_lock:
            prefetched = {r: self._prefetched.pop(r) for r in set(requests.values())
                          if r in self._prefetched}
        for request, (future, index) in prefetched.items():
            try:
                outcomes[request] = future.result()[index]
            except Exception as exc:  # the background compile itself broke
                outcomes[request] = _compiler_failed(exc)
        with self._prefetch_lock:
            for request in set(requests.values()) - set(outcomes):
                if request in self._compiled:
                    outcomes[request] = self._compiled[request]
                    self._compiled.move_to_end(request)
        missing = [r for r in dict.fromkeys(requests.values()) if r not in outcomes]
        if missing:
            outcomes.update(zip(missing, self._compile_requests(missing), strict=True))
        self._remember_compiles(outcomes)
        compiled: dict[int, CompileResult] = {}
        for index in indices:
            outcome = outcomes[requests[index]]
            if outcome.ok:
                compiled[index] = outcome
                continue
            status = (
                MeasurementStatus.TIMEOUT if outcome.timed_out else MeasurementStatus.COMPILE_ERROR
            )
            results[index] = Measurement(
                status,
                compile_ms=outcome.compile_ms,
                compile_cached=outcome.cached,
                log=outcome.log,
                error=_first_error_line(outcome.log),
            )
        return compiled


def _request(job: Job) -> CompileRequest:
    assert job.artifact is not None
    return job.artifact.source, tuple(job.artifact.compile_options)


def _compiler_failed(exc: BaseException) -> CompileResult:
    return CompileResult(
        ok=False, key="", cubin_path=None, log=f"compiler failed: {exc!r}", compile_ms=0.0
    )


class _WorkerHandle:
    """The parent's side of one worker process: start, feed one job, kill, restart."""

    def __init__(
        self,
        slot: int,
        device: str,
        entry: WorkerEntry,
        config: dict[str, Any],
        startup_timeout_s: float,
    ) -> None:
        self.slot = slot
        self.device = device
        self.fingerprint: dict[str, Any] | None = None
        self._entry = entry
        self._config = config
        self._startup_timeout_s = startup_timeout_s
        self._process: Child | None = None
        self._conn: Connection | None = None
        self._start_error = ""
        self._next_id = 0

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.is_alive()

    def ensure_started(self) -> bool:
        """Start the process unless running; False (with ``_start_error``) if it fails."""
        if self.alive:
            return True
        self._kill()
        process = Child(self._entry, (self.device, self._config),
                        name=f"pipetune-gpu-worker-{self.device}")
        parent_conn = process.conn
        self._process, self._conn = process, parent_conn
        try:
            if not parent_conn.poll(self._startup_timeout_s):
                raise RuntimeError(f"not ready within {self._startup_timeout_s:.0f} s")
            hello = parent_conn.recv()
        except (EOFError, OSError, RuntimeError) as exc:
            self._start_error = f"{exc or type(exc).__name__} (exit code {process.exitcode})"
            self._kill()
            return False
        if hello.get("type") != "ready":
            self._start_error = hello.get("error", repr(hello))
            self._kill()
            return False
        self.fingerprint = hello["fingerprint"]
        return True

    def run(self, job: Job, compiled: CompileResult | None) -> Measurement:
        """Send one job and wait for its answer, at most ``job.deadline_s``."""
        if not self.ensure_started():
            return self._failed(
                MeasurementStatus.CRASH, f"worker did not start: {self._start_error}"
            )
        assert self._conn is not None
        self._next_id += 1
        message = {
            "type": "job",
            "id": self._next_id,
            "job": job.to_dict(),
            "compile": compiled.to_dict() if compiled is not None else None,
        }
        started = time.perf_counter()
        try:
            self._conn.send(message)
            if not self._conn.poll(job.deadline_s):
                self._kill()
                return self._failed(
                    MeasurementStatus.TIMEOUT,
                    f"no result within the {job.deadline_s:g} s deadline; worker killed",
                    compiled,
                )
            reply = self._conn.recv()
        except (EOFError, OSError) as exc:
            code = self._reap()
            return self._failed(
                MeasurementStatus.CRASH,
                f"worker died after {time.perf_counter() - started:.1f} s "
                f"(exit code {code}): {exc or type(exc).__name__}",
                compiled,
            )
        result = Measurement.from_dict(reply["measurement"])
        if result.status is MeasurementStatus.CRASH:
            self._reap()  # the worker exits by itself after a sticky error
        return result

    def stop(self) -> None:
        """Ask the worker to leave, and kill it if it does not."""
        if self.alive and self._conn is not None and self._process is not None:
            try:
                self._conn.send({"type": "stop"})
                self._process.join(_STOP_GRACE_S)
            except OSError:
                pass
        self._kill()

    def _failed(
        self, status: MeasurementStatus, error: str, compiled: CompileResult | None = None
    ) -> Measurement:
        extra: dict[str, Any] = {}
        if compiled is not None:
            extra = {"compile_ms": compiled.compile_ms, "compile_cached": compiled.cached}
        return Measurement(status, error=error, device_index=self.slot, **extra)

    def _reap(self) -> int | None:
        """Wait briefly for a dying worker, then make sure it is gone; its exit code."""
        if self._process is not None:
            self._process.join(_STOP_GRACE_S)
        code = self._process.exitcode if self._process is not None else None
        self._kill()
        return code

    def _kill(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join()
        if self._conn is not None:
            self._conn.close()
        self._process, self._conn = None, None


def _first_error_line(log: str) -> str:
    for line in log.splitlines():
        if "error" in line.lower():
            return line.strip()
    return log.strip().splitlines()[0] if log.strip() else "compile failed"
