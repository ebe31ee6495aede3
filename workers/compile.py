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

import hashlib
import json
import multiprocessing
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

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
    blob = json.dumps([source, list(options), list(nvrtc_version)], separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


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


def _import_compiler(_: int) -> bool:
    """A pool process's warm-up: NVRTC's bindings loaded (where CuPy is installed)."""
    try:
        from cupy_backends.cuda.libs import nvrtc  # noqa: F401
    except ImportError:
        return False
    return True


class ParallelCompiler:
    """Compiles batches of sources in a pool of spawned CPU processes.

    Args:
        cache_dir: where cubins and logs are kept (default: ``default_cache_dir()``).
        max_workers: pool size (default: the CPU count).
        timeout_s: a compile still running this long after its result is awaited is
            reported as timed out, and the pool is replaced after the batch.
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
        self._pool: Any = None

    def _started_pool(self) -> Any:
        if self._pool is None:
            ctx = multiprocessing.get_context("spawn")
            self._pool = ctx.Pool(processes=self.max_workers)
        return self._pool

    def warm(self) -> None:
        """Spawn the pool and have every process import the compiler (about a second of
        a cold pool's first batch), before any source arrives."""
        self._started_pool().map(_import_compiler, range(self.max_workers), chunksize=1)

    def compile_many(
        self, requests: list[tuple[str, tuple[str, ...]]], default_arch: str
    ) -> list[CompileResult]:
        """Compile each (source, options); one result per request, in order."""
        unique = list(dict.fromkeys((src, tuple(opts)) for src, opts in requests))
        self._started_pool()
        pending = {
            req: self._pool.apply_async(compile_to_cache, (*req, self.cache_dir, default_arch))
            for req in unique
        }
        done: dict[tuple[str, tuple[str, ...]], CompileResult] = {}
        hung = False
        for req, future in pending.items():
            try:
                done[req] = future.get(timeout=self.timeout_s)
            except multiprocessing.TimeoutError:
                hung = True
                done[req] = CompileResult(
                    ok=False,
                    key="",
                    cubin_path=None,
                    log=f"NVRTC did not finish within {self.timeout_s:.0f} s",
                    compile_ms=self.timeout_s * 1e3,
                    timed_out=True,
                )
            except Exception as exc:  # the compiler itself failed (missing NVRTC, ...)
                done[req] = CompileResult(
                    ok=False,
                    key="",
                    cubin_path=None,
                    log=f"compiler failed: {exc!r}",
                    compile_ms=0.0,
                )
        if hung:
            self.close()
        return [done[(src, tuple(opts))] for src, opts in requests]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None
