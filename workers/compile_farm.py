"""RayCompiler: compilation as Ray tasks on the cluster's CPU nodes, returning cubins.

A fleet's GPU nodes need their CPU cores for little but launching; the sources of a batch
are compiled instead as Ray tasks placed on nodes that offer the ``pipetune_compile``
resource (CPU nodes, the head: ``ray start --resources '{"pipetune_compile": 8}'``), each
with NVRTC and the same options a local :class:`~workers.ParallelCompiler` uses (so the
cubin measured is the one a user of the artifact gets). A task returns the compile result
and the cubin's bytes; the caller (a GPU actor's pool) writes the cubin into its own cache
and answers later requests for the same source from memory. A task whose node is lost is
retried by Ray on another node; one that does not finish in time, or whose compiler
breaks, is a failed compile, never an exception. Ray is imported only here, lazily.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workers.compile import (
    DEFAULT_COMPILE_TIMEOUT_S,
    CompileResult,
    atomic_write,
    compile_to_cache,
    default_cache_dir,
)

#: The Ray custom resource a node offers once per compile it may run at a time.
COMPILE_RESOURCE = "pipetune_compile"

Request = tuple[str, tuple[str, ...]]
#: (source, options, default arch) -> (the CompileResult as a dict, the cubin's bytes).
RemoteCompile = Callable[[str, tuple[str, ...], str], tuple[dict[str, Any], bytes | None]]


def compile_on_node(source: str, options: tuple[str, ...],
                    default_arch: str) -> tuple[dict[str, Any], bytes | None]:
    """A compile task's body: NVRTC into the node's own cache; the cubin travels back."""
    result = compile_to_cache(source, options, str(default_cache_dir()), default_arch)
    cubin = Path(result.cubin_path).read_bytes() if result.ok and result.cubin_path else None
    return result.to_dict(), cubin


class RayCompiler:
    """A compiler (``compile_many``/``close``, as :class:`~workers.ParallelCompiler`) whose
    work runs as Ray tasks; see the module docstring.

    Args:
        cache_dir: where the returned cubins are kept here (default ``default_cache_dir()``).
        remote_compile: a task's body (tests give stand-ins).
        timeout_s: a batch's compiles not done this long after submission fail as timed out.
    """

    def __init__(self, cache_dir: str | os.PathLike[str] | None = None, *,
                 remote_compile: RemoteCompile = compile_on_node,
                 timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S) -> None:
        self.cache_dir = Path(cache_dir or default_cache_dir())
        self.timeout_s = timeout_s
        self._remote_compile = remote_compile
        self._known: dict[tuple[str, tuple[str, ...], str], CompileResult] = {}

    def compile_many(self, requests: list[Request], default_arch: str) -> list[CompileResult]:
        """Compile each (source, options); one result per request, in order."""
        import ray

        unique = [r for r in dict.fromkeys((src, tuple(opts)) for src, opts in requests)
                  if (*r, default_arch) not in self._known]
        task = ray.remote(self._remote_compile).options(
            num_cpus=1, resources={COMPILE_RESOURCE: 1}, max_retries=2)
        refs = {task.remote(src, opts, default_arch): (src, opts) for src, opts in unique}
        ready, late = ray.wait(list(refs), num_returns=len(refs), timeout=self.timeout_s)
        for ref in ready:
            self._known[(*refs[ref], default_arch)] = self._stored(ref)
        for ref in late:
            ray.cancel(ref, force=True)
            self._known[(*refs[ref], default_arch)] = CompileResult(
                ok=False, key="", cubin_path=None, compile_ms=self.timeout_s * 1e3,
                log=f"the compile farm did not finish within {self.timeout_s:.0f} s",
                timed_out=True)
        return [self._known[(src, tuple(opts), default_arch)] for src, opts in requests]

    def _stored(self, ref: Any) -> CompileResult:
        """A finished task's result, its cubin written into this side's cache."""
        import ray

        try:
            data, cubin = ray.get(ref)
        except Exception as exc:  # the task's compiler broke, or its retries ran out
            return CompileResult(ok=False, key="", cubin_path=None, compile_ms=0.0,
                                 log=f"compile farm failed: {type(exc).__name__}: {exc}")
        result = CompileResult.from_dict(data)
        if cubin is None:
            return result
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        path = self.cache_dir / f"{result.key}.cubin"
        atomic_write(path, cubin)
        return CompileResult(ok=True, key=result.key, cubin_path=str(path), log=result.log,
                             compile_ms=result.compile_ms, cached=result.cached)

    def close(self) -> None:
        """Nothing is held between batches (Ray owns the tasks)."""
        return None


def farm_offered() -> int:
    """How many compiles at a time the connected cluster's nodes offer (0: no farm)."""
    import ray

    return int(ray.cluster_resources().get(COMPILE_RESOURCE, 0))
