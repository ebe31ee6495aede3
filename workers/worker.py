"""The GPU worker process: load, verify and time candidates on one pinned GPU.

``worker_main`` is the process entry point. The parent (an executor) starts it as a
fresh interpreter (``workers.spawn``: nothing CUDA-related is inherited, and the
caller's script is never imported); the first thing it does is set
``CUDA_VISIBLE_DEVICES`` to its one GPU, before CuPy is imported. It then speaks a small
protocol of plain dicts over a ``multiprocessing`` connection:

  worker -> parent  ``{"type": "ready", "fingerprint": {...}}`` or ``{"type": "fatal", ...}``
  parent -> worker  ``{"type": "job", "id": n, "job": Job.to_dict(), "compile": {...}}``
  worker -> parent  ``{"type": "result", "id": n, "measurement": Measurement.to_dict()}``
  parent -> worker  ``{"type": "stop"}``

The parent enforces deadlines (it kills a worker that does not answer in time). After a
sticky CUDA error the worker reports ``crash`` and exits, since its context is unusable.
"""

from __future__ import annotations

import json
import math
import os
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from codegen.artifact import KernelArtifact, TensorMapArg, WorkspaceArg
from workers import _dtypes
from workers.baselines import BaselineUnavailable, prepare_baseline
from workers.compile import CompileResult
from workers.contract import Contract, check_tensor_args, contract
from workers.device import read_fingerprint
from workers.graph_timing import copies_for_cold_l2, time_graph_replays
from workers.inputs import build_inputs
from workers.l2_check import l2_check
from workers.launch import pack_arguments
from workers.protocol import GRAPH, Job, Measurement, MeasurementStatus
from workers.tensor_maps import encoder_for
from workers.timing import L2Flusher, time_launches
from workers.verify import error_bounds, reference

# CUDA errors after which the context is unusable (CUDA runtime / driver API error codes,
# same numbers in both): illegal address, launch timeout, device assert, hardware stack
# error, illegal instruction, misaligned address, invalid address space, invalid PC,
# launch failure, unknown.
STICKY_CUDA_ERRORS = frozenset({700, 702, 710, 714, 715, 716, 717, 718, 719, 999})
# Exit code of a worker that leaves after a sticky error (the parent respawns it).
EXIT_AFTER_CRASH = 3
_MAX_STATIC_SMEM_BYTES = 48 * 1024
_MODULES_KEPT = 64
Launch = Callable[[], Any]


def worker_main(conn: Any, visible_device: str, config: dict[str, Any]) -> None:
    """Process entry: pin to ``visible_device``, announce readiness, serve jobs until told."""
    os.environ["CUDA_VISIBLE_DEVICES"] = visible_device
    try:
        worker = GpuWorker(config.get("device_index"), config.get("codegen_version", ""))
    except Exception:
        conn.send({"type": "fatal", "error": traceback.format_exc()})
        return
    conn.send({"type": "ready", "fingerprint": worker.fingerprint})
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message["type"] == "stop":
            return
        job = Job.from_dict(message["job"])
        compiled = message.get("compile")
        result = worker.measure(job, CompileResult.from_dict(compiled) if compiled else None)
        conn.send({"type": "result", "id": message["id"], "measurement": result.to_dict()})
        if result.status is MeasurementStatus.CRASH:
            conn.close()
            os._exit(EXIT_AFTER_CRASH)


class _Lru(OrderedDict):
    """A dict that forgets its least recently used entries beyond ``capacity``."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity

    def get_or_make(self, key: Any, make: Any) -> Any:
        if key in self:
            self.move_to_end(key)
            return self[key]
        value = make()
        self[key] = value
        while len(self) > self.capacity:
            self.popitem(last=False)
        return value


@dataclass
class _Workload:
    """Inputs (kept), outputs (poisoned before each check) and the lazy fp32 reference."""

    op: str
    params: dict[str, Any]
    dtypes: dict[str, str]
    tensors: dict[str, Any]
    outputs: list[str]
    bounds: dict[str, float]
    ref32: dict[str, Any] | None = None
    copies: list[dict[str, Any]] | None = None


class GpuWorker:
    """Measures jobs on the current CUDA device (device 0 after pinning)."""

    def __init__(self, device_index: int | None, codegen_version: str) -> None:
        import cupy

        self.device_index = device_index
        cupy.cuda.Device(0).use()
        self.fingerprint = read_fingerprint(0, codegen_version)
        self._flush = L2Flusher(self.fingerprint["l2_bytes"])
        self._workload_key = ""
        self._workload_state: _Workload | None = None
        self._modules = _Lru(_MODULES_KEPT)

    def measure(self, job: Job, compiled: CompileResult | None) -> Measurement:
        """One Measurement for ``job``; never raises."""
        common: dict[str, Any] = {"device_index": self.device_index}
        if compiled is not None:
            common.update(
                compile_ms=compiled.compile_ms, compile_cached=compiled.cached, log=compiled.log
            )
        try:
            if job.baseline is not None:
                return self._measure_baseline(job, common)
            if compiled is None or not compiled.ok:
                raise ValueError("artifact jobs need a successful compile result")
            return self._measure_artifact(job, compiled, common)
        except (ValueError, BaselineUnavailable) as exc:
            return Measurement(MeasurementStatus.LAUNCH_ERROR, error=str(exc), **common)
        except Exception as exc:
            sticky = _cuda_status(exc) in STICKY_CUDA_ERRORS or not _context_healthy()
            status = MeasurementStatus.CRASH if sticky else MeasurementStatus.LAUNCH_ERROR
            return Measurement(status, error=_describe(exc), **common)

    def _measure_artifact(
        self, job: Job, compiled: CompileResult, common: dict[str, Any]
    ) -> Measurement:
        artifact = job.artifact
        assert artifact is not None
        op, params = job.workload["op"], job.workload["params"]
        if artifact.op != op:
            raise ValueError(f"artifact is for {artifact.op!r}, workload is {op!r}")
        specs = contract(op, params, job.tensors)
        dtypes = check_tensor_args(op, params, artifact.args, specs.values())
        _check_launch(artifact)
        workload = self._workload(op, params, specs, dtypes, job.seed)
        _check_tensor_map_bounds(artifact, workload)

        start = time.perf_counter()
        kernel = self._load(compiled, artifact.entry)
        attrs = kernel.attributes
        resources = {
            "registers": int(attrs["num_regs"]),
            "spill_bytes": int(attrs["local_size_bytes"]),
            "smem_bytes": int(attrs["shared_size_bytes"]) + artifact.dynamic_smem_bytes,
        }
        if artifact.dynamic_smem_bytes > _MAX_STATIC_SMEM_BYTES:
            kernel.max_dynamic_shared_size_bytes = artifact.dynamic_smem_bytes
        workspaces = _workspaces(artifact)  # held by this frame through every launch below
        grid, block = tuple(artifact.grid), tuple(artifact.block)
        encode = encoder_for(artifact)

        def bind(tensors: dict[str, Any]) -> Launch:
            pointers = {name: tensor.data.ptr for name, tensor in tensors.items()}
            pointers.update((name, buffer.data.ptr) for name, buffer in workspaces.items())
            args = pack_arguments(artifact.args, pointers, encode).values
            return lambda: kernel(grid, block, args, shared_mem=artifact.dynamic_smem_bytes)

        check = self._check(workload, bind(workload.tensors), workload.outputs)
        checked = {"verify_wall_ms": (time.perf_counter() - start) * 1e3, **resources, **common}
        return self._time_if_correct(job, workload, bind, check, checked)

    def _measure_baseline(self, job: Job, common: dict[str, Any]) -> Measurement:
        op, params = job.workload["op"], job.workload["params"]
        specs = contract(op, params, job.tensors)
        dtypes = {name: spec.dtype for name, spec in specs.items()}
        workload = self._workload(op, params, specs, dtypes, job.seed)
        start = time.perf_counter()
        launch, finish = prepare_baseline(job.baseline, op, params, workload.tensors, dtypes)
        bound = {id(workload.tensors): launch}

        def bind(tensors: dict[str, Any]) -> Launch:
            if id(tensors) not in bound:
                bound[id(tensors)] = prepare_baseline(job.baseline, op, params, tensors,
                                                      dtypes)[0]
            return bound[id(tensors)]

        def launch_and_finish() -> None:
            launch()
            finish()

        # A peer is held to the outputs it writes (PyTorch's SDPA returns no log-sum-exp).
        check = self._check(workload, launch_and_finish, workload.outputs[:1])
        checked = {"verify_wall_ms": (time.perf_counter() - start) * 1e3, **common}
        return self._time_if_correct(job, workload, bind, check, checked)

    def _time_if_correct(
        self,
        job: Job,
        workload: _Workload,
        bind: Callable[[dict[str, Any]], Launch],
        check: _Check,
        checked: dict[str, Any],
    ) -> Measurement:
        """``wrong_result`` past the bound; otherwise time the launch ``bind`` makes over the
        workload's tensors (by the graph method: over each of its operand copies) and report
        ``ok``."""
        checked = {"rel_error": check.rel_error, "error_bound": check.bound, **checked}
        if not check.rel_error <= check.bound:
            return Measurement(
                MeasurementStatus.WRONG_RESULT, error=check.describe(), **checked
            )
        start = time.perf_counter()
        if job.timing.method == GRAPH:
            copies = self._operand_copies(workload)
            samples = time_graph_replays([bind(tensors) for tensors in copies], job.timing)
        else:
            samples = time_launches(bind(workload.tensors), job.timing, self._flush)
        return Measurement.from_samples(
            samples, timing_wall_ms=(time.perf_counter() - start) * 1e3,
            timing_method=job.timing.method, **checked
        )

    def _operand_copies(self, workload: _Workload) -> list[dict[str, Any]]:
        """The workload's tensors, then copies of its inputs (the outputs shared) until
        their bytes exceed twice the L2: the graph method's rotation, built once."""
        if workload.copies is None:
            inputs = [n for n in workload.tensors if n not in workload.outputs]
            per_copy = sum(workload.tensors[n].nbytes for n in inputs)
            count = copies_for_cold_l2(per_copy, self.fingerprint["l2_bytes"])
            workload.copies = [workload.tensors] + [
                {**workload.tensors, **{n: workload.tensors[n].copy() for n in inputs}}
                for _ in range(count - 1)
            ]
        return workload.copies

    def _workload(
        self, op: str, params: dict[str, Any], specs: Contract, dtypes: dict[str, str],
        seed: int,
    ) -> _Workload:
        """The inputs of one workload, built once and kept until another workload comes."""
        import cupy

        contract_data = [spec.to_dict() for spec in specs.values()]
        key = json.dumps([op, params, contract_data, dtypes, seed], sort_keys=True)
        if key == self._workload_key and self._workload_state is not None:
            return self._workload_state
        self._workload_state = None  # free the previous workload's memory first
        cupy.get_default_memory_pool().free_all_blocks()
        tensors = build_inputs(cupy, op, params, dtypes, seed, specs.values())
        outputs = [name for name, spec in specs.items() if spec.role == "output"]
        for name in outputs:
            storage = _dtypes.storage_dtype(cupy, dtypes[name])
            tensors[name] = cupy.empty(specs[name].shape, dtype=storage)
        self._workload_state = _Workload(
            op, params, dtypes, tensors, outputs, bounds=error_bounds(specs, dtypes)
        )
        self._workload_key = key
        return self._workload_state

    def _check(self, workload: _Workload, launch: Any, outputs: list[str]) -> _Check:
        """Poison ``outputs``, launch once, compare each with the reference; the result of
        the first output past its bound, else of the first output."""
        import cupy

        for name in outputs:
            _dtypes.fill_nan(workload.tensors[name], workload.dtypes[name])
        launch()
        cupy.cuda.Device().synchronize()
        if workload.ref32 is None:
            inputs32 = {
                n: _dtypes.to_float32(cupy, t, workload.dtypes[n])
                for n, t in workload.tensors.items()
                if n not in workload.outputs
            }
            workload.ref32 = reference(cupy, workload.op, workload.params, inputs32)
        checks = []
        for name in outputs:
            out32 = _dtypes.to_float32(cupy, workload.tensors[name], workload.dtypes[name])
            rel_error, nonfinite = l2_check(out32, workload.ref32[name])
            checks.append(_Check(name, rel_error, workload.bounds[name], nonfinite))
        return next((c for c in checks if not c.rel_error <= c.bound), checks[0])

    def _load(self, compiled: CompileResult, entry: str) -> Any:
        import cupy

        module = self._modules.get_or_make(
            compiled.cubin_path, lambda: cupy.RawModule(path=compiled.cubin_path)
        )
        return module.get_function(entry)


def _check_launch(artifact: KernelArtifact) -> None:
    if tuple(artifact.cluster) != (1, 1, 1) and "__cluster_dims__" not in artifact.source:
        # CuPy launches with cuLaunchKernel, which takes no cluster shape: a cluster must
        # be compiled in with __cluster_dims__.
        raise ValueError("a cluster launch needs __cluster_dims__ in the kernel source")
    if any(d < 1 for d in (*artifact.grid, *artifact.block)):
        raise ValueError(f"grid {artifact.grid} / block {artifact.block} must be positive")


def _workspaces(artifact: KernelArtifact) -> dict[str, Any]:
    """A zeroed device buffer per workspace of the kernel, for this job's launches: the
    kernel leaves it reusable, so the check, the warm-up and the timed launches share one."""
    import cupy

    return {arg.name: cupy.zeros(arg.bytes, dtype=cupy.uint8)
            for arg in artifact.args if isinstance(arg, WorkspaceArg)}


def _check_tensor_map_bounds(artifact: KernelArtifact, workload: _Workload) -> None:
    """A tensor map (over a tensor of the contract, in its dtype: checked before) must stay
    inside its tensor."""
    for arg in (a for a in artifact.args if isinstance(a, TensorMapArg)):
        tensor = workload.tensors[arg.tensor]
        extent = arg.global_dims[0] * _dtypes.itemsize(arg.dtype) + sum(
            (d - 1) * s for d, s in zip(arg.global_dims[1:], arg.global_strides_bytes, strict=True)
        )
        if extent > tensor.nbytes:
            raise ValueError(
                f"tensor map {arg.name!r} spans {extent} B, "
                f"tensor {arg.tensor!r} has {tensor.nbytes} B"
            )


def _cuda_status(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    return int(status) if isinstance(status, int) else None


def _context_healthy() -> bool:
    """Whether the CUDA context still works after an error (a sticky error poisons it)."""
    try:
        import cupy

        cupy.cuda.Device().synchronize()
        probe = cupy.ones(1, dtype=cupy.float32)
        return float(probe.sum()) == 1.0
    except Exception:
        return False


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class _Check:
    """One output compared with the reference."""

    output: str
    rel_error: float
    bound: float
    nonfinite: int

    def describe(self) -> str:
        return f"{self.output}: {_wrong_result_text(self.rel_error, self.bound, self.nonfinite)}"


def _wrong_result_text(rel_error: float, bound: float, nonfinite: int) -> str:
    if math.isnan(rel_error):
        return f"output has {nonfinite} NaN/inf elements (unwritten or overflowed)"
    return f"relative L2 error {rel_error:.3e} exceeds the bound {bound:.1e}"
