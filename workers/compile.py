"""NVRTC compilation of kernel sources into cubins, cached on disk and run in parallel.

Compilation needs no GPU, so a batch is compiled in a pool of CPU processes before any
GPU worker sees it: a compile error never costs a GPU worker, and every core works on
the batch whatever the number of GPUs. NVRTC is reached through CuPy's binding and given
the options ``cupy.RawModule(code=source, options=compile_options)`` adds on its own
(``CUPY_IMPLICIT_OPTIONS``), so the cubin measured is the one a user of the artifact gets.
The cache key is the sha256 of (source, options, NVRTC version); failures are cached too,
so a broken source is not compiled twice.
"""

from __future__ import annotations

import json
import os
import queue
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from scheduler_search.canonical import canonical_sha256
from workers.spawn import Child

# What CuPy's RawModule appends to the user's options (CuPy 14.2, cupy/cuda/compiler.py:
# _compile_with_cache_cuda adds -ftz=true; _compile_using_nvrtc adds the default execution
# space). Its own -arch=sm_XX is left out: an explicit -arch=sm_90a in the artifact wins
# (checked with NVRTC 13.0: wgmma compiles with both present, not with sm_90 alone).
CUPY_IMPLICIT_OPTIONS = ("-ftz=true", "--device-as-default-execution-space")
DEFAULT_COMPILE_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class CompileResult:
    """Outcome of compiling one (source, options) pair."""

    ok: bool
    key: str
    cubin_path: str | None
    log: str
    compile_ms: float
    cached: bool = False
    timed_out: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CompileResult:
        return cls(**data)


def default_cache_dir() -> Path:
    """``~/.cache/pipetune/cubin``; the service passes its configured directory instead."""
    return Path.home() / ".cache" / "pipetune" / "cubin"


def nvrtc_options(options: tuple[str, ...], default_arch: str) -> tuple[str, ...]:
    """The artifact's options plus CuPy's implicit ones and ``-arch`` if none is given."""
    has_arch = any(o.startswith(("-arch", "--gpu-architecture")) for o in options)
    arch = () if has_arch else (f"-arch=sm_{default_arch}",)
    extra = tuple(o for o in CUPY_IMPLICIT_OPTIONS if o not in options)
    return (*options, *arch, *extra)


def compile_key(source: str, options: tuple[str, ...], nvrtc_version: tuple[int, int]) -> str:
    return canonical_sha256([source, list(options), list(nvrtc_version)])


def compile_to_cache(
    source: str, options: tuple[str, ...], cache_dir: str, default_arch: str
) -> CompileResult:
    """Compile ``source`` with NVRTC unless the cache has it; store cubin and log on disk."""
    from cupy_backends.cuda.libs import nvrtc

    options = nvrtc_options(tuple(options), default_arch)
    key = compile_key(source, options, tuple(nvrtc.getVersion()))
    root = Path(cache_dir)
    meta_path, cubin_path = root / f"{key}.json", root / f"{key}.cubin"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if not meta["ok"] or cubin_path.exists():
            return CompileResult(
                ok=meta["ok"],
                key=key,
                cubin_path=str(cubin_path) if meta["ok"] else None,
                log=meta["log"],
                compile_ms=meta["compile_ms"],
                cached=True,
            )
    start = time.perf_counter()
    program = nvrtc.createProgram(source, f"{key[:16]}.cu", [], [])
    try:
        try:
            nvrtc.compileProgram(program, list(options))
            cubin, ok = nvrtc.getCUBIN(program), True
        except nvrtc.NVRTCError:
            cubin, ok = b"", False
        log = nvrtc.getProgramLog(program)
    finally:
        nvrtc.destroyProgram(program)
    compile_ms = (time.perf_counter() - start) * 1e3
    root.mkdir(parents=True, exist_ok=True)
    if ok:
        atomic_write(cubin_path, cubin)
    meta = {"ok": ok, "log": log, "compile_ms": compile_ms, "options": list(options)}
    atomic_write(meta_path, json.dumps(meta).encode())
    return CompileResult(
        ok=ok, key=key, cubin_path=str(cubin_path) if ok else None, log=log, compile_ms=compile_ms
    )


def atomic_write(path: Path, data: bytes) -> None:
    """Write via a temporary file and rename, so concurrent compilers never see half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _import_compiler() -> bool:
    """NVRTC's bindings loaded (where CuPy is installed): a compile process's warm-up."""
    try:
        from cupy_backends.cuda.libs import nvrtc  # noqa: F401
    except ImportError:
        return False
    return True


#: A compile process's request: (source, options, cache_dir, default_arch), or None to
#: import the compiler and answer whether it could.
CompileJob = tuple[str, tuple[str, ...], str, str] | None


def compile_server(conn: Connection) -> None:
    """A compile process's entry (``workers.spawn``): answer each request with
    ``("ok", CompileResult | bool)`` or ``("error", text)`` until the pipe closes."""
    while True:
        try:
            request: CompileJob = conn.recv()
        except EOFError:
            return
        try:
            answer = ("ok", _import_compiler() if request is None else compile_to_cache(*request))
        except Exception as exc:  # the compiler itself failed (missing NVRTC, ...)
            answer = ("error", repr(exc))
        conn.send(answer)


class _CompileProcess:
    """One compile process, started on first use and again after it is killed.

    One question at a time: a pool's warm-up and a batch's compile may ask the same
    process from two threads, and interleaved on one pipe each would read the other's
    answer (a warm-up's ``True`` taken for a compile's result).
    """

    def __init__(self) -> None:
        self._child: Child | None = None
        self._asking = threading.Lock()

    @property
    def alive(self) -> bool:
        return self._child is not None and self._child.is_alive()

    def ask(self, request: CompileJob, timeout_s: float) -> tuple[str, Any]:
        """The answer to ``request``, or ``("timeout", None)`` (the process is killed) or
        ``("error", text)`` when it dies."""
        with self._asking:
            return self._ask(request, timeout_s)

    def _ask(self, request: CompileJob, timeout_s: float) -> tuple[str, Any]:
        if not self.alive:
            self.stop()
            self._child = Child(compile_server, name="pipetune-compile")
        assert self._child is not None
        try:
            self._child.conn.send(request)
            if not self._child.conn.poll(timeout_s):
                self.stop()
                return "timeout", None
            return self._child.conn.recv()
        except (EOFError, OSError) as exc:
            self.stop()
            return "error", f"compile process died: {exc or type(exc).__name__}"

    def stop(self) -> None:
        if self._child is not None:
            self._child.kill()
            self._child.join()
            self._child.close()
            self._child = None


class ParallelCompiler:
    """Compiles batches of sources in a pool of CPU processes (``workers.spawn``
    children: the caller's script is never imported).

    Args:
        cache_dir: where cubins and logs are kept (default: ``default_cache_dir()``).
        max_workers: pool size (default: the CPU count).
        timeout_s: a compile that takes longer is reported as timed out, and its process
            is killed (a new one starts for the next source).
    """

    def __init__(
        self,
        cache_dir: str | os.PathLike[str] | None = None,
        max_workers: int | None = None,
        timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S,
    ) -> None:
        self.cache_dir = str(cache_dir or default_cache_dir())
        self.max_workers = max_workers or os.cpu_count() or 1
        self.timeout_s = timeout_s
        self._processes: list[_CompileProcess] = []

    def _pool(self) -> list[_CompileProcess]:
        if not self._processes:
            self._processes = [_CompileProcess() for _ in range(self.max_workers)]
        return self._processes

    def _fan_out(self, requests: list[CompileJob]) -> list[tuple[str, Any]]:
        """Each request's answer, in order; the requests spread over the processes (one
        thread feeds each, so a process takes the next request as soon as it is free)."""
        todo: queue.SimpleQueue[int] = queue.SimpleQueue()
        for index in range(len(requests)):
            todo.put(index)
        answers: list[tuple[str, Any]] = [("error", "not compiled")] * len(requests)

        def feed(process: _CompileProcess) -> None:
            while True:
                try:
                    index = todo.get_nowait()
                except queue.Empty:
                    return
                answers[index] = process.ask(requests[index], self.timeout_s)

        _in_threads(feed, self._pool()[: len(requests)])
        return answers

    def warm(self) -> None:
        """Start every process and have it import the compiler (about a second of a cold
        pool's first batch), before any source arrives."""
        cold = [p for p in self._pool() if not p.alive]
        _in_threads(lambda process: process.ask(None, self.timeout_s), cold)

    def compile_many(
        self, requests: list[tuple[str, tuple[str, ...]]], default_arch: str
    ) -> list[CompileResult]:
        """Compile each (source, options); one result per request, in order."""
        unique = list(dict.fromkeys((src, tuple(opts)) for src, opts in requests))
        answers = self._fan_out([(src, opts, self.cache_dir, default_arch)
                                 for src, opts in unique])
        done = {req: _result(*answer, self.timeout_s)
                for req, answer in zip(unique, answers, strict=True)}
        return [done[(src, tuple(opts))] for src, opts in requests]

    def close(self) -> None:
        for process in self._processes:
            process.stop()
        self._processes = []


def _in_threads(work: Callable[[_CompileProcess], Any],
                processes: list[_CompileProcess]) -> None:
    """``work(process)`` for each process at once, each in a thread of its own."""
    threads = [threading.Thread(target=work, args=(p,), daemon=True) for p in processes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _result(status: str, payload: Any, timeout_s: float) -> CompileResult:
    """A compile process's answer as a CompileResult."""
    if status == "ok":
        return payload
    if status == "timeout":
        return CompileResult(ok=False, key="", cubin_path=None,
                             log=f"NVRTC did not finish within {timeout_s:.0f} s",
                             compile_ms=timeout_s * 1e3, timed_out=True)
    return CompileResult(ok=False, key="", cubin_path=None, log=f"compiler failed: {payload}",
                         compile_ms=0.0)
