"""Tuned kernels inside PyTorch programs: a custom operator ``torch.compile`` can trace,
and drop-ins for PyTorch's own ops.

    import torch
    import pipetune.torch

    gemm = pipetune.torch.register(artifact)        # torch.ops.pipetune.gemm_<hash12>
    model = torch.compile(lambda a, b: gemm(a, b).relu(), fullgraph=True)

    c = pipetune.torch.gemm(a, b)                    # tuned kernel if cached, else a @ b
    pipetune.torch.configure(tune_on_miss=True)      # a miss is tuned in the background

:func:`register` wraps the loaded kernel in ``torch.library.custom_op`` with a fake (meta)
implementation that says what it returns (the contract's output shapes and dtypes, on the
inputs' device) without running it, which is what tracing needs; for a range's kernels
(a RangeArtifact) the outputs' shapes follow the size of the call's input (a GEMM's m).
The drop-ins (:class:`DropIns`; :func:`gemm` and :func:`attention` on a default instance)
first look for a tuned range holding the workload (a GEMM's m in a range tuned for its n,
k, dtype and layout; SDPA's ``seq_q = seq_kv`` in a self-attention range, or one length
in a range of it), remembered per workload without its range dimensions, so a call of
another size runs the range's kernel without asking the database again; else they look the
exact workload up; both once per workload and GPU (memoised: a hit costs no database
round trip per call). They run the tuned kernel on a hit and PyTorch's op on a miss.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable
from typing import Any

from pipetune import load

#: (op, params, device index) -> the kernel's artifact JSON, or None.
Lookup = Callable[[str, dict[str, Any], int], "dict[str, Any] | None"]
#: (op, exact params, device index) -> the RangeArtifact JSON of a tuned range holding
#: the workload, or None.
RangeLookup = Callable[[str, dict[str, Any], int], "dict[str, Any] | None"]
#: (op, params, device index) -> what the cache measured of the workload's kernel
#: (``latency_us``, the run's ``baseline_latency_us``), or None.
FiguresLookup = Callable[[str, dict[str, Any], int], "dict[str, Any] | None"]
#: (op, params, device index) -> None: tune the workload (it is then in the cache).
Tuner = Callable[[str, dict[str, Any], int], None]
_UNKNOWN = object()


def register(artifact: Any, name: str | None = None) -> Any:
    """Register a tuned kernel as the custom operator ``pipetune::<name>`` and return it.

    Args:
        artifact: what :func:`pipetune.load` takes (a KernelArtifact or a RangeArtifact,
            its dict or JSON).
        name: the operator's name in the ``pipetune`` namespace (default
            ``<op>_<schedule hash[:12]>``, unique per kernel; for a range
            ``<op>_range_<range hash[:12]>``).

    The operator takes the kernel's input tensors positionally, in contract order, and
    returns its output (attention: ``(o, lse)``), allocated by the call. A range's
    operator takes every size of its range: its outputs' shapes follow the size read from
    the input the range names (a GEMM's ``a.shape[0]``, a self-attention range's
    ``q.shape[2]`` in PyTorch's layout), symbolic under ``torch.compile`` with dynamic
    shapes.
    """
    import torch

    from workers.ranges import RangeKernel

    kernel = load(artifact)
    art = kernel.artifact
    if isinstance(kernel, RangeKernel):
        default_name = f"{art.op}_range_{art.hash[:12]}"
        inputs_names = [t.name for t in kernel.inputs]
        position, axis = inputs_names.index(kernel.size_input), kernel.size_axis

        def output_shapes(tensors: tuple[Any, ...]) -> list[tuple[Any, ...]]:
            size = tensors[position].shape[axis]
            return [t.shape_at(size) for t in kernel.outputs]
    else:
        default_name = f"{art.op}_{art.schedule_hash[:12]}"

        def output_shapes(tensors: tuple[Any, ...]) -> list[tuple[Any, ...]]:
            return [t.shape for t in kernel.outputs]

    qualname = f"pipetune::{name or default_name}"
    inputs = ", ".join(f"Tensor {t.name}" for t in kernel.inputs)
    dtypes = [getattr(torch, t.dtype) for t in kernel.outputs]
    returns = "Tensor" if len(dtypes) == 1 else f"({', '.join('Tensor' for _ in dtypes)})"
    schema = f"({inputs}) -> {returns}"

    @torch.library.custom_op(qualname, mutates_args=(), schema=schema)
    def op(*tensors: Any) -> Any:
        return kernel(*tensors)

    @op.register_fake
    def _(*tensors: Any) -> Any:
        device = tensors[0].device
        made = tuple(torch.empty(shape, dtype=dtype, device=device)
                     for shape, dtype in zip(output_shapes(tensors), dtypes, strict=True))
        return made[0] if len(made) == 1 else made

    return op


class DropIns:
    """PyTorch ops that run a tuned kernel of the workload and GPU when the cache holds
    one (a tuned range holding the workload first, then the exact workload), and
    PyTorch's own op otherwise.

    Args:
        database_url: the cache (default: the user's, as :func:`pipetune.tune` uses).
        tune_on_miss: tune a missed workload in a background thread, so that a later call
            runs a tuned kernel.
        budget: that tune's budget (``{"seconds": 60}`` by default).
        lookup: where kernels come from (default: the local cache; e.g. a
            :class:`pipetune.Client`'s schedules instead).
        range_lookup: where ranges come from (default: the local cache's tuned ranges;
            none where ``lookup`` is given alone, so kernels come from one place). Asked
            once per workload without its range dimension (a GEMM's n, k, dtype, layout
            and GPU), and again only for a size that the ranges found miss.
        tuner: how a miss is tuned (default: :func:`pipetune.tune` in this process).
        figures: what the cache measured of a workload's kernel, where the drop-in
            chooses between two cached kernels that compute the same thing (Mamba2's chunk
            scan reading ``cb`` or computing it in its tile); default: the local cache's,
            none where ``lookup`` is given alone.
    """

    def __init__(self, *, database_url: str | None = None, tune_on_miss: bool = False,
                 budget: dict[str, Any] | None = None, lookup: Lookup | None = None,
                 range_lookup: RangeLookup | None = None,
                 tuner: Tuner | None = None, figures: FiguresLookup | None = None) -> None:
        self.database_url = database_url
        self.tune_on_miss = tune_on_miss
        self.budget = budget or {"seconds": 60}
        self._lookup = lookup or self._lookup_local
        if range_lookup is None:
            range_lookup = _no_range if lookup is not None else self._range_lookup_local
        self._range_lookup = range_lookup
        if figures is None:
            figures = _no_figures if lookup is not None else self._figures_local
        self._figures = figures
        #: (scan params, device) -> whether the fused scan serves them (memoised choice).
        self._fused_choice: dict[tuple[str, int], bool] = {}
        self._tuner = tuner or self._tune_local
        self._memo: dict[tuple[str, str, int], Any] = {}
        #: (op, params without the range dimensions, device) -> the range kernels found.
        self._ranges: dict[tuple[str, tuple[Any, ...], int], list[Any]] = {}
        self._tuning: set[tuple[str, str, int]] = set()
        self._lock = threading.Lock()

    def gemm(self, a: Any, b: Any) -> Any:
        """``a @ b`` (2-D, fp16 / bf16, ``a`` row-major; ``b`` row-major or the transpose
        of a row-major matrix)."""
        workload = _gemm_workload(a, b)
        kernel = self.kernel("gemm", workload[0], a) if workload else None
        if kernel is None:
            import torch

            return torch.matmul(a, b)
        return kernel(a, workload[1])

    def attention(self, q: Any, k: Any, v: Any, *, is_causal: bool = False,
                  scales: tuple[Any, Any, Any] | None = None) -> Any:
        """``scaled_dot_product_attention(q, k, v, is_causal=...)`` on (batch, heads, seq,
        head_dim) tensors, GQA when k and v have fewer heads. 8-bit q, k, v
        (``float8_e4m3fn``) take ``scales``, their per-tensor descales (one-element fp32
        tensors on the GPU: ``q_scale, k_scale, v_scale``), and give bf16. Differentiable:
        where autograd records the call, a tuned kernel runs as an operator whose backward
        is the tuned backward kernel, or SDPA's where none is cached."""
        fp8 = _dtype_name(q) == TORCH_FP8
        if fp8 and (scales is None or len(scales) != 3):
            raise ValueError("scales: 8-bit q, k, v need their per-tensor scales "
                             "(q_scale, k_scale, v_scale)")
        params = _attention_params(q, k, v, is_causal)
        kernel = self.kernel("attention", params, q) if params else None
        if kernel is not None and not fp8 and params and _wants_gradients(q, k, v):
            return self._trained_attention(kernel, params, q, k, v)
        if kernel is None:
            from torch.nn.functional import scaled_dot_product_attention

            if fp8:  # PyTorch's SDPA has no 8-bit form: the bf16 one, on scaled copies
                q, k, v = (_widened(x, s) for x, s in zip((q, k, v), scales, strict=True))
            return scaled_dot_product_attention(q, k, v, is_causal=is_causal,
                                                enable_gqa=k.shape[1] != q.shape[1])
        return kernel(q, k, v, *(scales if fp8 else ()))[0]

    def mamba_chunk_scan_combined(
            self, x: Any, dt: Any, A: Any, B: Any, C: Any, chunk_size: int, D: Any = None,
            z: Any = None, dt_bias: Any = None, initial_states: Any = None,
            seq_idx: Any = None, cu_seqlens: Any = None, dt_softplus: bool = False,
            dt_limit: tuple[float, float] = (0.0, float("inf")),
            return_final_states: bool = False, return_varlen_states: bool = False,
            state_dtype: Any = None) -> Any:
        """``mamba_ssm``'s ``mamba_chunk_scan_combined`` (same arguments and results): the
        forward on the tuned chunk-state (with the state passing) and chunk-scan kernels
        where the cache holds both (``pipetune._mamba2``; the scan in the form that
        :meth:`mamba2_kernels` chooses), the gradients ``mamba_ssm``'s backward. Calls
        the kernels do not serve (``cu_seqlens``, a ragged last chunk, fp32) and misses
        run ``mamba_ssm``'s own op; without it, a RuntimeError says what is missing."""
        from pipetune import _kernel_registry as registry
        from pipetune import _mamba2 as ssd

        ssd.check_shapes(x, dt, A, B, C, D, z, initial_states)
        gated = z is not None and not _wants_gradients(x, dt, A, B, C, D, z, dt_bias,
                                                       initial_states)
        fp32_states = state_dtype is not None and _dtype_name(state_dtype) == "float32"
        found = None
        if _on_gpu(x) and cu_seqlens is None and not return_varlen_states:
            found = ssd.workloads(x, B, chunk_size, D, initial_states, gated, fp32_states,
                                  packed=seq_idx is not None)
        kernels = list(self.mamba2_kernels(found, x)) if found else []
        if not found or None in kernels:
            upstream = ssd.upstream_forward()
            if upstream is None:
                raise RuntimeError(
                    "pipetune.torch.mamba_chunk_scan_combined: no tuned kernels serve this "
                    "call and mamba_ssm is not importable; tune mamba2_chunk_state "
                    "(pass_states) and mamba2_chunk_scan for it, or install mamba_ssm")
            return upstream(x, dt, A, B, C, chunk_size, D=D, z=z, dt_bias=dt_bias,
                            initial_states=initial_states, seq_idx=seq_idx,
                            cu_seqlens=cu_seqlens, dt_softplus=dt_softplus, dt_limit=dt_limit,
                            return_final_states=return_final_states,
                            return_varlen_states=return_varlen_states,
                            state_dtype=state_dtype)
        call = ssd.SSDCall(chunk_size, dt_softplus, tuple(dt_limit),
                           *(registry.register(k) for k in kernels), gate_in_kernel=gated)
        out, final_states = ssd.combined(x, dt, A, B, C, D, z, dt_bias, initial_states, call,
                                         seq_idx)
        return (out, final_states) if return_final_states else out

    def mamba2_kernels(self, spec: Any, like: Any) -> tuple[Any, Any]:
        """The chunk-state and chunk-scan kernels serving the SSD forward whose
        ``mamba2_ssd`` spec is ``spec`` (:func:`pipetune._mamba2.workloads`), each None on
        a miss. Where the cache holds both forms of the scan, the one its measurements
        say makes the faster forward (:func:`pipetune._mamba2.fused_is_faster`); with
        ``tune_on_miss`` a miss of either form is tuned, so the choice is made between
        both."""
        from pipetune import _mamba2 as ssd

        params = {role: kernel.params() for role, kernel in spec.kernels().items()}
        state_kernel = self.kernel("mamba2_chunk_state", params["state"], like)
        fused = self.kernel("mamba2_chunk_scan", params["scan_in_tile"], like)
        unfused = self.kernel("mamba2_chunk_scan", params["scan"], like)
        if fused is None or unfused is None:
            return state_kernel, fused or unfused
        device = int(like.device.index or 0)
        key = (spec.workload_key(), device)
        if key not in self._fused_choice:
            self._fused_choice[key] = ssd.fused_is_faster(
                self._figures("mamba2_chunk_scan", params["scan_in_tile"], device),
                self._figures("mamba2_chunk_scan", params["scan"], device))
        return state_kernel, fused if self._fused_choice[key] else unfused

    def _trained_attention(self, forward: Any, params: dict[str, Any], q: Any, k: Any,
                           v: Any) -> Any:
        """The tuned forward as a differentiable op, its gradients from the tuned backward
        of the workload where one is cached (else SDPA's: ``_attention_training``)."""
        from codegen import has_renderer
        from pipetune import _attention_training as training

        backward = None
        if has_renderer("attention_backward"):
            backward = self.kernel("attention_backward", {**params, "deterministic": False}, q)
        return training.attention(q, k, v, params["causal"], training.register(forward),
                                  training.register(backward) if backward else training.NO_KERNEL)

    def kernel(self, op: str, params: dict[str, Any], like: Any) -> Any:
        """The loaded tuned kernel of ``op`` at ``params`` on ``like``'s GPU (a range's
        kernel where a range holds the workload), or None."""
        device = int(like.device.index or 0)
        dims = _range_dims(op)
        ranges = None
        if dims:
            fixed = (op, tuple(sorted((name, value) for name, value in params.items()
                                      if name not in dims)), device)
            ranges = self._ranges.get(fixed)
            if ranges:
                for found in ranges:
                    if found.covers(params):
                        return found
        key = (op, json.dumps(params, sort_keys=True), device)
        kernel = self._memo.get(key, _UNKNOWN)
        if kernel is _UNKNOWN:
            # Ranges are asked for once per fixed workload, and again for a size the
            # ranges found so far miss (another range may hold it).
            if dims and ranges != []:
                kernel = self._find_range(fixed, op, params, device)
                if kernel is not None:
                    return kernel
            artifact = self._lookup(op, params, device)
            kernel = load(artifact) if artifact is not None else None
            self._memo[key] = kernel
            if kernel is None and self.tune_on_miss:
                self._start_tune(key, op, params, device)
        return kernel

    def _find_range(self, fixed: tuple[str, tuple[Any, ...], int], op: str,
                    params: dict[str, Any], device: int) -> Any:
        """The range kernel holding the workload, asked of the range lookup (and kept
        with the fixed workload's ranges), or None."""
        artifact = self._range_lookup(op, params, device)
        with self._lock:
            ranges = self._ranges.setdefault(fixed, [])
        if artifact is None:
            return None
        kernel = load(artifact)
        if not kernel.covers(params):
            return None
        if all(known.artifact.hash != kernel.artifact.hash for known in ranges):
            ranges.append(kernel)
        return kernel

    def _start_tune(self, key: tuple[str, str, int], op: str, params: dict[str, Any],
                    device: int) -> None:
        with self._lock:
            if key in self._tuning:
                return
            self._tuning.add(key)

        def tune() -> None:
            try:
                self._tuner(op, params, device)
            finally:
                with self._lock:
                    self._memo.pop(key, None)  # the next call looks the cache up again
                    self._tuning.discard(key)

        threading.Thread(target=tune, name=f"pipetune-tune-{op}", daemon=True).start()

    def _lookup_local(self, op: str, params: dict[str, Any], device: int) -> Any:
        from service.runs.in_process import cached_kernel
        from service.schemas import TuneRequest

        return cached_kernel(TuneRequest(op=op, params=params, device=f"cuda:{device}"),
                             self.database_url)

    def _range_lookup_local(self, op: str, params: dict[str, Any], device: int) -> Any:
        try:
            from service.runs.in_process import cached_range
        except ImportError:  # a service without tuned ranges
            return None
        from service.schemas import TuneRequest

        return cached_range(TuneRequest(op=op, params=params, device=f"cuda:{device}"),
                            self.database_url)

    def _figures_local(self, op: str, params: dict[str, Any], device: int) -> Any:
        from service.runs.in_process import cached_figures
        from service.schemas import TuneRequest

        return cached_figures(TuneRequest(op=op, params=params, device=f"cuda:{device}"),
                              self.database_url)

    def _tune_local(self, op: str, params: dict[str, Any], device: int) -> None:
        from pipetune.local import tune

        tune(op, device=f"cuda:{device}", budget=self.budget, database_url=self.database_url,
             progress=False, **params)


def _no_range(op: str, params: dict[str, Any], device: int) -> None:
    return None


def _no_figures(op: str, params: dict[str, Any], device: int) -> None:
    return None


@functools.cache
def _range_dims(op: str) -> tuple[str, ...]:
    """The dimensions of ``op`` a range may span (a GEMM's m)."""
    from scheduler_search.ops import runtime_dims

    return runtime_dims(op)


def _wants_gradients(*tensors: Any) -> bool:
    """Whether autograd records this call: an input needing gradients, grad mode on."""
    if not any(getattr(t, "requires_grad", False) for t in tensors):
        return False
    import torch

    return bool(torch.is_grad_enabled())


def _on_gpu(tensor: Any) -> bool:
    return bool(tensor.device.type == "cuda")


def _dtype_name(tensor: Any) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _gemm_workload(a: Any, b: Any) -> tuple[dict[str, Any], Any] | None:
    """The GEMM workload of ``a @ b`` and the tensor the kernel reads as ``b`` (the
    row-major N x K matrix when ``b`` is its transpose), or None where no kernel applies."""
    dtype = _dtype_name(a)
    if (a.dim() != 2 or b.dim() != 2 or dtype not in ("float16", "bfloat16")
            or _dtype_name(b) != dtype or a.device.type != "cuda" or not a.is_contiguous()):
        return None
    (m, k), n = a.shape, b.shape[1]
    if b.is_contiguous():
        layout, storage = "kn", b
    elif b.t().is_contiguous():
        layout, storage = "nk", b.t()
    else:
        return None
    return {"m": m, "n": n, "k": k, "dtype": dtype, "b_layout": layout}, storage


#: PyTorch's name of the 8-bit float attention kernels take (the spec's ``float8_e4m3``).
TORCH_FP8 = "float8_e4m3fn"


def _widened(x: Any, scale: Any) -> Any:
    """An 8-bit tensor as bf16, times its per-tensor scale."""
    import torch

    return x.to(torch.bfloat16) * scale.to(torch.bfloat16)


def _attention_params(q: Any, k: Any, v: Any, causal: bool) -> dict[str, Any] | None:
    dtype = _dtype_name(q)
    tensors = (q, k, v)
    if (dtype not in ("float16", "bfloat16", TORCH_FP8) or any(t.dim() != 4 for t in tensors)
            or any(_dtype_name(t) != dtype or not t.is_contiguous() for t in tensors)
            or q.device.type != "cuda" or k.shape != v.shape):
        return None
    batch, heads, seq_q, head_dim = q.shape
    return {"batch": batch, "heads": heads, "kv_heads": k.shape[1], "seq_q": seq_q,
            "seq_kv": k.shape[2], "head_dim": head_dim, "causal": bool(causal),
            "dtype": "float8_e4m3" if dtype == TORCH_FP8 else dtype, "layout": "bhsd"}


_default = DropIns()


def configure(**options: Any) -> DropIns:
    """Replace the default drop-ins (:func:`gemm`, :func:`attention`) with
    ``DropIns(**options)``, e.g. ``configure(tune_on_miss=True)``."""
    global _default
    _default = DropIns(**options)
    return _default


def gemm(a: Any, b: Any) -> Any:
    """``a @ b`` through the default drop-ins (see :class:`DropIns`)."""
    return _default.gemm(a, b)


def attention(q: Any, k: Any, v: Any, *, is_causal: bool = False,
              scales: tuple[Any, Any, Any] | None = None) -> Any:
    """SDPA through the default drop-ins (see :class:`DropIns`)."""
    return _default.attention(q, k, v, is_causal=is_causal, scales=scales)


def mamba_chunk_scan_combined(x: Any, dt: Any, A: Any, B: Any, C: Any, chunk_size: int,
                              **options: Any) -> Any:
    """``mamba_ssm``'s SSD forward through the default drop-ins (see
    :meth:`DropIns.mamba_chunk_scan_combined`)."""
    return _default.mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, **options)


__all__ = ["DropIns", "attention", "configure", "gemm", "mamba_chunk_scan_combined",
           "register"]
