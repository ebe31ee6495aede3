"""Peer baselines, timed by the same worker with the same method as generated kernels.

A baseline is a pair of callables over the workload's tensors: ``launch()`` enqueues the
peer's computation (what is timed) and ``finish()`` copies its last result into the
workload's output tensor (so the same reference check applies). Peers:

  - ``cublas`` (gemm): ``torch.matmul(out=c)`` into the preallocated ``c``, the call users
    make (cuBLAS); without PyTorch ``cupy.matmul`` (also cuBLAS; CuPy cannot multiply
    bfloat16). PyTorch's call is also the one a CUDA graph captures cleanly.
  - ``scaled_mm`` (gemm of 8-bit floats): ``torch._scaled_mm`` (cuBLASLt) with the
    workload's per-tensor scales, into ``c``'s dtype.
  - ``torch_epilogue`` / ``cublaslt_epilogue`` (gemm with a fused epilogue): the matmul
    then PyTorch's ops for the epilogue, one kernel each, as a user first writes it; and
    the strongest calls a user has, cuBLASLt's own fused bias (+ ReLU or tanh GELU, scale
    as alpha) through ``torch._addmm_activation`` / ``torch.addmm``, then PyTorch's ops
    for what it cannot fuse (see :func:`_torch_epilogue`).
  - ``sdpa_cudnn`` / ``sdpa_flash`` (attention): PyTorch's
    ``scaled_dot_product_attention`` with the cuDNN or FlashAttention-2 backend forced,
    on (batch, heads, seq, head_dim) copies of the same inputs made before timing (8-bit
    inputs widened to bf16 and scaled: the 16-bit attention an FP8 user would run instead).
  - ``sdpa_cudnn_backward`` / ``sdpa_flash_backward`` (attention_backward): the backward
    of SDPA with the backend forced, as ``torch.autograd.grad`` of its output with the
    workload's dO; the forward runs once while the peer is prepared and is not timed
    (grouped heads: k and v repeated per query head, their gradients summed by autograd).
  - ``flash_attn_4`` (attention): FlashAttention-4's CuTe DSL forward,
    ``flash_attn.cute.flash_attn_func`` (the ``flash-attn-4`` wheel with
    ``nvidia-cutlass-dsl``; it has Hopper kernels), on (batch, seq, heads, head_dim) views
    of the workload's tensors (a bhsd workload's transposed views: the kernel takes strided
    tensors, so nothing is copied); its causal mask is bottom-right aligned, so a causal
    case with a query length other than the key length is not its to run. Without the
    package the peer is unavailable.
  - ``cutlass_sm80`` (gemm, 16-bit, no epilogue): CUTLASS 2.x's multistage sm_80
    tensor-op GEMM (``bench/cutlass/sm80_gemm.cu``, built against the public
    NVIDIA/cutlass headers into the library ``PIPETUNE_CUTLASS_SM80_LIB`` names, never
    committed), the Ampere-class GEMM peer; of its tile configurations the one fastest at
    the workload's shape on this GPU, as CUTLASS's profiler picks. Without the library
    the peer is unavailable.
  - ``mamba_ssm_chunk_state`` / ``mamba_ssm_chunk_scan`` (Mamba2): the official Triton
    kernels of ``state-spaces/mamba``, ``_chunk_state_fwd(B, x, dt, dA_cumsum,
    states_in_fp32=...)`` (the spec's choice) and
    ``_chunk_scan_fwd(cb, x, dt, dA_cumsum, C, states, D=D, z=z)`` (after
    ``_bmm_chunk_fwd(C, B)``, timed with it, where the workload computes cb in the tile),
    called on zero-copy views of the workload's arrays; each allocates its result, which
    ``finish()`` copies into ``states`` / ``out``. They are found on ``PYTHONPATH``
    (docs/benchmarks.md: the ``mamba_ssm/ops/triton`` and ``mamba_ssm/utils`` folders with empty
    package ``__init__`` files, never committed); without them, or without PyTorch and
    Triton, the peer is unavailable.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

Launch = Callable[[], Any]
#: ``prepare(params, tensors, dtypes)``: a peer's ``(launch, finish)`` over the workload's
#: storage arrays by name.
Prepare = Callable[[dict[str, Any], dict[str, Any], dict[str, str]], tuple[Launch, Launch]]


@dataclass(frozen=True)
class Baseline:
    """A peer: the operator it computes and how it is prepared."""

    op: str
    prepare: Prepare


class BaselineUnavailable(ValueError):
    """The peer cannot run here (PyTorch missing, backend refuses the shape, ...)."""


def prepare_baseline(
    name: str, op: str, params: dict[str, Any], tensors: dict[str, Any], dtypes: dict[str, str]
) -> tuple[Launch, Launch]:
    """``(launch, finish)`` for peer ``name`` over ``tensors`` (storage arrays by name)."""
    baseline = BASELINES.get(name)
    if baseline is None or baseline.op != op:
        raise BaselineUnavailable(f"no baseline {name!r} for operator {op!r}")
    return baseline.prepare(params, tensors, dtypes)


def register_baseline(name: str, op: str, prepare: Prepare) -> None:
    """Make ``prepare`` the peer ``name`` of operator ``op`` (a new operator registers its
    own; a second registration of a name replaces it)."""
    BASELINES[name] = Baseline(op, prepare)


def _cublas(
    params: dict[str, Any], tensors: dict[str, Any], dtypes: dict[str, str]
) -> tuple[Launch, Launch]:
    import cupy

    a, b, c = tensors["a"], tensors["b"], tensors["c"]
    transpose_b = params.get("b_layout", "kn") == "nk"
    try:
        torch = _import_torch()
    except BaselineUnavailable:
        if dtypes["c"] == "bfloat16":
            raise
        b_op = b.T if transpose_b else b
        return (lambda: cupy.matmul(a, b_op, out=c)), _nothing
    a_t, b_t, c_t = (_as_torch(torch, x, dtypes["c"]) for x in (a, b, c))
    b_op_t = b_t.t() if transpose_b else b_t
    return (lambda: torch.matmul(a_t, b_op_t, out=c_t)), _nothing


def _torch_epilogue(
    name: str, params: dict[str, Any], tensors: dict[str, Any], dtypes: dict[str, str]
) -> tuple[Launch, Launch]:
    """A GEMM with its epilogue ``act(scale · (a @ b) + bias) + residual`` in PyTorch. Each
    launch allocates its result; ``finish`` copies it into ``c``.

    ``torch_epilogue`` is the unfused sequence as a user first writes it: ``torch.matmul``
    (cuBLAS), then one op per step (``* scale``, ``+ bias``, the activation, ``+
    residual``), each its own kernel.

    ``cublaslt_epilogue`` is the strongest call a user has: cuBLASLt's fused epilogue
    computes ``act(scale · (a @ b) + bias)`` inside the GEMM, through
    ``torch._addmm_activation(bias, a, b, alpha=scale, use_gelu=...)`` for ReLU and tanh
    GELU or ``torch.addmm(bias, a, b, alpha=scale)`` without an activation (``F.linear(x,
    w, bias)`` runs the latter); what it cannot fuse follows as PyTorch ops on its result:
    an activation it has not (erf GELU, SiLU) and a residual (one add, in place). That is
    the whole epilogue in one call where ``cublaslt_fuses`` says so, and the bias (and the
    activation) fused otherwise. PyTorch takes cuBLASLt's epilogue path for a 1-D bias of
    the inputs' type only, so this peer needs a bias and 16-bit inputs written in their
    own type.

    Why a residual is not handed to cuBLAS as its C matrix (``beta = 1``): ``torch.addmm``
    with a full (m, n) input leaves cuBLASLt's bias path and first copies that input into
    the output, for the GEMM to read back (aten/src/ATen/native/cuda/Blas.cpp,
    ``addmm_out_cuda_impl``): as many passes over m x n as the add it replaces, and no
    bias with it. ``torch.addmm(residual + bias, a, b)`` adds a pass, and the in-place
    ``residual.addmm_(a, b)`` (no copy) overwrites the residual a model still holds. So
    bias + residual is ``torch.addmm(bias, a, b).add_(residual)``, what ``F.linear(x, w,
    bias) + residual`` runs, two kernels where pipetune's is one: the unfused sequence stays
    the run's baseline there (``GemmSpec.run_baseline``) and this sequence is reported
    beside it."""
    epilogue = params.get("epilogue") or {}
    scale, act = float(epilogue.get("scale", 1.0)), epilogue.get("act", "none")
    if name == "cublaslt_epilogue" and (not epilogue.get("bias") or dtypes["a"] in _TORCH_FP8
                                        or dtypes["a"] != dtypes["c"]):
        raise BaselineUnavailable(f"{name}: cuBLASLt's epilogue through PyTorch needs a bias "
                                  "and 16-bit inputs written in their own type")
    torch = _import_torch()
    import torch.nn.functional as F

    dtype = dtypes["c"]
    c = _as_torch(torch, tensors["c"], dtype)
    bias = _as_torch(torch, tensors["bias"], dtype) if epilogue.get("bias") else None
    residual = (_as_torch(torch, tensors["residual"], dtype) if epilogue.get("residual")
                else None)
    activations = {"none": lambda y: y, "relu": F.relu, "gelu": F.gelu, "silu": F.silu,
                   "gelu_tanh": lambda y: F.gelu(y, approximate="tanh")}
    result: list[Any] = [None]

    def finish() -> None:
        c.copy_(result[0])

    if name != "cublaslt_epilogue":
        product = _torch_product(torch, params, tensors, dtypes)

        def unfused() -> None:
            y = product()
            if scale != 1.0:
                y = y * scale
            if bias is not None:
                y = y + bias
            y = activations[act](y)
            result[0] = y + residual if residual is not None else y

        return unfused, finish
    a, b = (_as_torch(torch, tensors[n], dtype) for n in ("a", "b"))
    b_op = b.t() if params.get("b_layout", "kn") == "nk" else b
    if act in ("relu", "gelu_tanh"):  # cuBLASLt's RELU_BIAS / GELU_BIAS epilogue
        lt = partial(torch._addmm_activation, bias, a, b_op, alpha=scale,
                     use_gelu=act == "gelu_tanh")
        rest = activations["none"]
    else:  # its BIAS epilogue; another activation follows as a kernel of its own
        lt, rest = partial(torch.addmm, bias, a, b_op, alpha=scale), activations[act]

    def fused() -> None:
        y = rest(lt())
        result[0] = y.add_(residual) if residual is not None else y

    try:
        fused()
    except RuntimeError as exc:
        raise BaselineUnavailable(f"{name}: {exc}") from exc
    return fused, finish


#: PyTorch's names of the 8-bit float types.
_TORCH_FP8 = {"float8_e4m3": "float8_e4m3fn", "float8_e5m2": "float8_e5m2"}


def _torch_product(torch: Any, params: dict[str, Any], tensors: dict[str, Any],
                   dtypes: dict[str, str]) -> Callable[[], Any]:
    """``a @ b`` in PyTorch: ``torch.matmul`` (cuBLAS) in the inputs' type, or for 8-bit
    floats ``torch._scaled_mm`` (cuBLASLt: B column-major, i.e. the n x k matrix's
    transpose, with the workload's per-tensor scales)."""
    nk = params.get("b_layout", "kn") == "nk"
    if dtypes["a"] not in _TORCH_FP8:
        a, b = (_as_torch(torch, tensors[n], dtypes[n]) for n in ("a", "b"))
        b_op = b.t() if nk else b
        return lambda: torch.matmul(a, b_op)
    if not nk:
        raise BaselineUnavailable("torch._scaled_mm takes 8-bit B stored n x k only")
    kind = getattr(torch, _TORCH_FP8[dtypes["a"]])
    a, b = (_as_torch(torch, tensors[n], "uint8").view(kind) for n in ("a", "b"))
    scale_a, scale_b = (_as_torch(torch, tensors[n], "float32") for n in ("scale_a", "scale_b"))
    out_dtype = getattr(torch, dtypes["c"])
    return lambda: torch._scaled_mm(a, b.t(), scale_a=scale_a, scale_b=scale_b,
                                    out_dtype=out_dtype)


def _scaled_mm(
    params: dict[str, Any], tensors: dict[str, Any], dtypes: dict[str, str]
) -> tuple[Launch, Launch]:
    """An 8-bit GEMM through ``torch._scaled_mm`` (cuBLASLt), into ``c``'s dtype."""
    torch = _import_torch()
    product = _torch_product(torch, params, tensors, dtypes)
    c = _as_torch(torch, tensors["c"], dtypes["c"])
    result: list[Any] = [None]

    def launch() -> None:
        result[0] = product()

    try:
        launch()
    except RuntimeError as exc:
        raise BaselineUnavailable(f"scaled_mm: {exc}") from exc
    return launch, (lambda: c.copy_(result[0]))


def _sdpa(
    name: str, params: dict[str, Any], tensors: dict[str, Any], dtypes: dict[str, str]
) -> tuple[Launch, Launch]:
    torch = _import_torch()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    backend = SDPBackend.CUDNN_ATTENTION if name == "sdpa_cudnn" else SDPBackend.FLASH_ATTENTION
    dtype = dtypes["o"]
    # SDPA takes (batch, heads, seq, head_dim): a bshd workload is transposed once, here.
    heads_second = params.get("layout", "bshd") == "bhsd"
    q, k, v = (_sdpa_input(torch, tensors, n, dtypes) for n in "qkv")
    if not heads_second:
        q, k, v = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    o = _as_torch(torch, tensors["o"], dtype)
    causal = bool(params["causal"])
    grouped = params["heads"] != params["kv_heads"]
    result: list[Any] = [None]

    def run(k_in: Any, v_in: Any, gqa: bool) -> None:
        with sdpa_kernel([backend]):
            result[0] = scaled_dot_product_attention(
                q, k_in, v_in, is_causal=causal, enable_gqa=gqa
            )

    def finish() -> None:
        o.copy_(result[0] if heads_second else result[0].transpose(1, 2))

    try:
        run(k, v, grouped)
        return (lambda: run(k, v, grouped)), finish
    except RuntimeError as exc:
        if not grouped:
            raise BaselineUnavailable(f"{name}: {exc}") from exc
    # The backend refuses enable_gqa: give it kv heads repeated per query head instead.
    group = params["heads"] // params["kv_heads"]
    k_full, v_full = (x.repeat_interleave(group, dim=1) for x in (k, v))
    try:
        run(k_full, v_full, False)
    except RuntimeError as exc:
        raise BaselineUnavailable(f"{name}: {exc}") from exc
    return (lambda: run(k_full, v_full, False)), finish


def _sdpa_backward(
    name: str, params: dict[str, Any], tensors: dict[str, Any], dtypes: dict[str, str]
) -> tuple[Launch, Launch]:
    """SDPA's backward alone: the forward run once here with gradients on, then each
    launch is ``torch.autograd.grad`` of its output with the workload's dO (the graph
    kept), so the forward's cost is not timed; dq, dk, dv copied into the workload's."""
    torch = _import_torch()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    backend = (SDPBackend.CUDNN_ATTENTION if name == "sdpa_cudnn_backward"
               else SDPBackend.FLASH_ATTENTION)
    dtype = dtypes["q"]
    heads_second = params.get("layout", "bshd") == "bhsd"
    group = params["heads"] // params["kv_heads"]

    def as_bhsd(x: Any) -> Any:
        x = _as_torch(torch, x, dtype)
        return x if heads_second else x.transpose(1, 2)

    q, k, v, d_out = (as_bhsd(tensors[n]).detach().clone() for n in ("q", "k", "v", "do"))
    leaves = [x.requires_grad_(True) for x in (q, k, v)]
    if group > 1:  # each query head's kv head, repeated: gradients sum over the group
        k, v = (x.repeat_interleave(group, dim=1) for x in (leaves[1], leaves[2]))
    try:
        with sdpa_kernel([backend]):
            out = scaled_dot_product_attention(q, k, v, is_causal=bool(params["causal"]))
    except RuntimeError as exc:
        raise BaselineUnavailable(f"{name}: {exc}") from exc
    grads: list[Any] = [None]

    def launch() -> None:
        with sdpa_kernel([backend]):
            grads[0] = torch.autograd.grad(out, leaves, d_out, retain_graph=True)

    def finish() -> None:
        for grad, target in zip(grads[0], ("dq", "dk", "dv"), strict=True):
            _as_torch(torch, tensors[target], dtype).copy_(
                grad if heads_second else grad.transpose(1, 2))

    return launch, finish


def _sdpa_input(torch: Any, tensors: dict[str, Any], name: str, dtypes: dict[str, str]) -> Any:
    """Input ``name`` as SDPA takes it: a view in the output's type, or 8-bit floats
    widened once and times their per-tensor scale (the 16-bit attention an FP8 user would
    run instead; the conversion is not timed)."""
    if dtypes[name] not in _TORCH_FP8:
        return _as_torch(torch, tensors[name], dtypes["o"])
    kind = getattr(torch, _TORCH_FP8[dtypes[name]])
    wide = _as_torch(torch, tensors[name], "uint8").view(kind).to(getattr(torch, dtypes["o"]))
    return wide * _as_torch(torch, tensors[f"{name}_scale"], "float32").to(wide.dtype)


#: Peer -> (its mamba_ssm module, Triton kernel, the workload tensors it reads in call
#: order, its output).
_MAMBA_SSM = {
    "mamba_ssm_chunk_state": (
        "ssd_chunk_state", "_chunk_state_fwd_kernel", ("b", "x", "dt", "dA_cumsum"), "states",
    ),
    "mamba_ssm_chunk_scan": (
        "ssd_chunk_scan", "_chunk_scan_fwd_kernel",
        ("cb", "x", "dt", "dA_cumsum", "c", "states", "D"), "out",
    ),
}
#: Peer -> the workload shape its Triton kernel was last autotuned for (see _retune).
_TUNED_FOR: dict[str, str] = {}


def _mamba_ssm(
    name: str, params: dict[str, Any], tensors: dict[str, Any], dtypes: dict[str, str]
) -> tuple[Launch, Launch]:
    torch = _import_torch()
    module_name, kernel_name, inputs, output = _MAMBA_SSM[name]
    try:
        peer = importlib.import_module(f"mamba_ssm.ops.triton.{module_name}")
    except ImportError as exc:
        raise BaselineUnavailable(
            f"{name}: mamba_ssm's Triton kernels are not importable ({exc}); put a folder "
            "holding state-spaces/mamba's mamba_ssm/ops/triton and mamba_ssm/utils (with empty "
            "mamba_ssm/__init__.py and mamba_ssm/ops/__init__.py) on PYTHONPATH"
        ) from exc
    _retune(name, getattr(peer, kernel_name, None), params)
    # With cb_in_tile there is no cb input: its slot is filled by _bmm_chunk_fwd's.
    args = [_as_torch(torch, tensors[n], dtypes[n]) if n in tensors else None for n in inputs]
    out = _as_torch(torch, tensors[output], dtypes[output])
    result: list[Any] = [None]

    seq_idx = _as_torch(torch, tensors["seq_idx"], "int32") if params.get("seq_idx") else None
    if name == "mamba_ssm_chunk_state" and params.get("pass_states"):
        return _mamba_ssm_passing(torch, peer, params, args, tensors, dtypes, seq_idx)
    if name == "mamba_ssm_chunk_state":
        in_fp32 = bool(params.get("states_in_fp32", True))

        def launch() -> None:
            result[0] = peer._chunk_state_fwd(*args, seq_idx=seq_idx, states_in_fp32=in_fp32)
    else:
        *operands, d_skip = args
        gate = _as_torch(torch, tensors["z"], dtypes["z"]) if params.get("z") else None
        gram = _gram_from_b(torch, params, tensors, dtypes, seq_idx)

        def launch() -> None:
            if gram is not None:  # our kernel computes cb itself: the peer's two kernels
                operands[0] = gram()
            # (out, out_x): with z, the peer also writes the ungated out_x its backward reads.
            result[0], _ = peer._chunk_scan_fwd(*operands, D=d_skip, z=gate, seq_idx=seq_idx)

    return launch, (lambda: out.copy_(result[0]))


def _gram_from_b(torch: Any, params: dict[str, Any], tensors: dict[str, Any],
                 dtypes: dict[str, str], seq_idx: Any) -> Callable[[], Any] | None:
    """With ``cb_in_tile`` (the scan takes ``b``, not ``cb``): ``mamba_ssm``'s
    ``_bmm_chunk_fwd(C, B)`` in fp32 as ``mamba_chunk_scan_combined`` calls it, timed with
    the scan; else None."""
    if not params.get("cb_in_tile"):
        return None
    from mamba_ssm.ops.triton.ssd_bmm import _bmm_chunk_fwd

    c, b = (_as_torch(torch, tensors[n], dtypes[n]) for n in ("c", "b"))
    return lambda: _bmm_chunk_fwd(c, b, params["chunk_size"], seq_idx=seq_idx,
                                  output_dtype=torch.float32)


def _mamba_ssm_passing(torch: Any, peer: Any, params: dict[str, Any], args: list[Any],
                       tensors: dict[str, Any], dtypes: dict[str, str],
                       seq_idx: Any) -> tuple[Launch, Launch]:
    """The chunk state fused with the state passing, as ``mamba_chunk_scan_combined`` runs
    the pair: ``_chunk_state_fwd`` (fp32 states), then ``_state_passing_fwd`` writing the
    states entering each chunk in the spec's states dtype, and the final states."""
    passing = importlib.import_module("mamba_ssm.ops.triton.ssd_state_passing")
    states_out, final_out = (_as_torch(torch, tensors[n], dtypes[n])
                             for n in ("states", "final_states"))
    initial = (_as_torch(torch, tensors["initial_states"], "float32")
               if params.get("initial_states") else None)
    da_last = args[3][:, :, :, -1]
    result: list[Any] = [None]

    def launch() -> None:
        states = peer._chunk_state_fwd(*args, seq_idx=seq_idx, states_in_fp32=True)
        result[0] = passing._state_passing_fwd(
            states.flatten(-2), da_last,
            initial_states=None if initial is None else initial.flatten(-2),
            seq_idx=seq_idx, chunk_size=params["chunk_size"], out_dtype=states_out.dtype)

    def copy() -> None:
        entering, final = result[0]
        states_out.copy_(entering.view(states_out.shape))
        final_out.copy_(final.view(final_out.shape))

    return launch, copy


def _retune(name: str, kernel: Any, params: dict[str, Any]) -> None:
    """Forget the Triton autotuner's choice when the workload shape changes.

    mamba_ssm's kernels are autotuned on (headdim, dstate, chunk_size) alone, so a worker
    would otherwise time every later batch and seqlen with the config picked for the first
    shape it saw; re-tuning per shape gives the peer its best case, as a model that always
    runs one shape sees it. ``Autotuner.cache`` maps a key to its chosen config (Triton 3).
    """
    shape = json.dumps(params, sort_keys=True)
    cache = getattr(kernel, "cache", None)
    if isinstance(cache, dict) and _TUNED_FOR.get(name) != shape:
        cache.clear()
        _TUNED_FOR[name] = shape


def _flash_attn_4(
    params: dict[str, Any], tensors: dict[str, Any], dtypes: dict[str, str]
) -> tuple[Launch, Launch]:
    torch = _import_torch()
    try:
        from flash_attn.cute import flash_attn_func
    except ImportError as exc:
        raise BaselineUnavailable(f"flash_attn_4: flash_attn.cute does not import: {exc}") from exc
    if dtypes["q"] in _TORCH_FP8:
        raise BaselineUnavailable("flash_attn_4: its forward takes 16-bit inputs only")
    causal = bool(params["causal"])
    if causal and params["seq_q"] != params["seq_kv"]:
        raise BaselineUnavailable("flash_attn_4: its causal mask is bottom-right aligned, the "
                                  "spec's top-left: they differ where seq_q != seq_kv")
    dtype = dtypes["o"]
    heads_second = params.get("layout", "bshd") == "bhsd"
    q, k, v = (_as_torch(torch, tensors[n], dtype) for n in "qkv")
    if heads_second:
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    o = _as_torch(torch, tensors["o"], dtype)
    result: list[Any] = [None]

    def launch() -> None:
        result[0], _ = flash_attn_func(q, k, v, causal=causal)

    def finish() -> None:
        o.copy_(result[0].transpose(1, 2) if heads_second else result[0])

    try:
        launch()
    except Exception as exc:  # the DSL's compile and launch errors are its own types
        raise BaselineUnavailable(f"flash_attn_4: {type(exc).__name__}: {exc}") from exc
    return launch, finish


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise BaselineUnavailable(f"PyTorch is not importable: {exc}") from exc
    return torch


def _as_torch(torch: Any, array: Any, dtype: str) -> Any:
    """Zero-copy view of a CuPy array as a torch tensor of ``dtype`` (bf16 from uint16)."""
    tensor = torch.from_dlpack(array)
    return tensor.view(torch.bfloat16) if dtype == "bfloat16" else tensor


def _nothing() -> None:
    return None


#: Launches of each CUTLASS configuration timed to pick the fastest at a shape.
_CUTLASS_PICK_LAUNCHES = 5


def _cutlass_sm80(
    params: dict[str, Any], tensors: dict[str, Any], dtypes: dict[str, str]
) -> tuple[Launch, Launch]:
    import ctypes
    import os

    path = os.environ.get("PIPETUNE_CUTLASS_SM80_LIB")
    if not path or not os.path.exists(path):
        raise BaselineUnavailable("cutlass_sm80: PIPETUNE_CUTLASS_SM80_LIB names no library "
                                  "(build bench/cutlass/sm80_gemm.cu as its header says)")
    if dtypes["a"] not in ("float16", "bfloat16") or params.get("epilogue"):
        raise BaselineUnavailable("cutlass_sm80: 16-bit GEMMs without an epilogue only")
    import cupy

    library = ctypes.CDLL(path)
    gemm = library.pipetune_cutlass_sm80_gemm
    gemm.argtypes = [ctypes.c_int] * 6 + [ctypes.c_void_p] * 4
    gemm.restype = ctypes.c_int
    configs = ctypes.c_char_p.in_dll(library, "pipetune_cutlass_sm80_configs").value
    count = len((configs or b"").split(b";"))
    a, b, c = (tensors[n].data.ptr for n in "abc")
    fixed = (int(dtypes["a"] == "bfloat16"), int(params.get("b_layout", "kn") == "nk"),
             int(params["m"]), int(params["n"]), int(params["k"]), a, b, c)

    def launch_config(config: int) -> int:
        return gemm(config, *fixed, cupy.cuda.get_current_stream().ptr)

    times: dict[int, float] = {}
    for config in range(count):
        if launch_config(config):
            continue  # the shape is not this configuration's
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        for _ in range(_CUTLASS_PICK_LAUNCHES):
            launch_config(config)
        end.record()
        end.synchronize()
        times[config] = cupy.cuda.get_elapsed_time(start, end)
    if not times:
        raise BaselineUnavailable("cutlass_sm80: no configuration runs this shape")
    best = min(times, key=times.__getitem__)
    return (lambda: launch_config(best)), _nothing


#: Peer name -> its operator and preparation (:func:`register_baseline` adds one).
BASELINES: dict[str, Baseline] = {
    "cublas": Baseline("gemm", _cublas),
    "scaled_mm": Baseline("gemm", _scaled_mm),
    "cutlass_sm80": Baseline("gemm", _cutlass_sm80),
    "torch_epilogue": Baseline("gemm", partial(_torch_epilogue, "torch_epilogue")),
    "cublaslt_epilogue": Baseline("gemm", partial(_torch_epilogue, "cublaslt_epilogue")),
    "sdpa_cudnn": Baseline("attention", partial(_sdpa, "sdpa_cudnn")),
    "sdpa_flash": Baseline("attention", partial(_sdpa, "sdpa_flash")),
    "flash_attn_4": Baseline("attention", _flash_attn_4),
    **{name: Baseline("attention_backward", partial(_sdpa_backward, name))
       for name in ("sdpa_cudnn_backward", "sdpa_flash_backward")},
    **{name: Baseline(op, partial(_mamba_ssm, name)) for name, op in (
        ("mamba_ssm_chunk_state", "mamba2_chunk_state"),
        ("mamba_ssm_chunk_scan", "mamba2_chunk_scan"))},
}
