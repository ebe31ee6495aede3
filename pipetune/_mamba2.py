"""Mamba2's SSD forward as a model calls it, ``mamba_chunk_scan_combined``, on tuned kernels.

Upstream's forward (``mamba_ssm/ops/triton/ssd_combined.py``) runs five kernels. Here:

1. the step sizes (``dt + dt_bias``, softplus, clamped to ``dt_limit``) and their
   cumulative sum times ``A`` within each chunk: five PyTorch ops on (batch, nheads,
   seqlen) fp32 vectors in a model's call (10 MB at 8 x 4096 x 80 heads);
2. the chunk state fused with the state passing: the tuned ``mamba2_chunk_state`` kernel
   with ``pass_states`` (the states entering each chunk, in ``C``'s dtype as upstream
   writes them unless ``state_dtype`` says fp32, and the fp32 final state);
3. the tuned ``mamba2_chunk_scan`` kernel, with ``D`` and the gate ``z``: where the cache
   holds the scan that computes ``C Bᵀ`` in its tile (``cb_in_tile``), on ``B`` itself;
   else on ``C Bᵀ`` per chunk from an fp32 batched product in PyTorch (upstream's
   ``_bmm_chunk_fwd``).

One operator, ``pipetune::mamba_chunk_scan_combined``, runs them (kernels named by the
keys :func:`pipetune._kernel_registry.register` gives), with a fake implementation for
``torch.compile`` and nothing allocated outside the caller's framework, so CUDA graphs
capture it. Its gradients are upstream's backward (``_mamba_chunk_scan_combined_bwd``),
which reads the forward's ungated output: where gradients are wanted and ``z`` is given,
the scan kernel runs ungated and the gate is a PyTorch product after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipetune._kernel_registry import KERNELS

#: Upstream's softplus switches to the identity above this step size.
SOFTPLUS_THRESHOLD = 20.0


@dataclass(frozen=True)
class SSDCall:
    """The non-tensor arguments of one call, and the kernels that serve it."""

    chunk_size: int
    dt_softplus: bool
    dt_limit: tuple[float, float]
    state_kernel: str
    scan_kernel: str
    #: The scan kernel applies ``silu(z)`` itself (inference); else it writes the
    #: ungated output and the gate follows in PyTorch (the backward needs both).
    gate_in_kernel: bool


def chunk_steps(dt: Any, dt_bias: Any, A: Any, chunk: int, softplus: bool,
                limit: tuple[float, float]) -> tuple[Any, Any]:
    """dt (b, s, h), A (h,) -> (dt, dA_cumsum), each (b, h, chunks, chunk) fp32 and
    contiguous, as the kernels read them: the steps (``dt + dt_bias``, softplus'd,
    clamped to ``limit``, as upstream always clamps: the default (0, inf) zeroes negative
    steps) by chunk, and the running sum of ``dt A`` within each chunk.

    Five PyTorch kernels in a model's call (bias, softplus, the default limit): the steps
    are widened and moved heads-first by one copy, the bias added in place, the clamp
    left out where softplus already keeps the steps in the default limit, and ``A``
    (constant along a chunk) multiplies the running sum instead of every step."""
    import torch

    batch, seqlen, nheads = dt.shape
    steps = torch.empty((batch, nheads, seqlen), device=dt.device, dtype=torch.float32)
    steps.copy_(dt.transpose(1, 2))
    if dt_bias is not None:
        steps += dt_bias.float()[:, None]
    if softplus:
        steps = torch.nn.functional.softplus(steps, threshold=SOFTPLUS_THRESHOLD)
    if not (softplus and limit[0] <= 0.0 and limit[1] == float("inf")):
        steps.clamp_(min=limit[0], max=limit[1])
    by_chunk = steps.view(batch, nheads, seqlen // chunk, chunk)
    return by_chunk, torch.cumsum(by_chunk, dim=-1).mul_(A.float()[None, :, None, None])


def chunk_gram(C: Any, B: Any, chunk: int, seq_idx: Any = None) -> Any:
    """C, B (b, s, g, n) -> cb (b, chunks, g, chunk, chunk) fp32: ``C_l · B_s`` within each
    chunk, every (l, s) (the scan masks s > l); with ``seq_idx``, zero where l and s lie in
    different sequences (as upstream's ``_bmm_chunk_fwd``)."""
    import torch

    batch, seqlen, ngroups, dstate = C.shape
    shape = (batch, seqlen // chunk, chunk, ngroups, dstate)
    c, b = (t.view(shape).permute(0, 1, 3, 2, 4) for t in (C, B))
    if C.is_cuda and C.dtype in (torch.float16, torch.bfloat16):
        # 16-bit products on the tensor cores, summed and written in fp32 (as upstream's
        # kernel does), instead of fp32 copies of C and B multiplied on the CUDA cores.
        flat = (-1, chunk, dstate)
        cb = torch.bmm(c.reshape(flat), b.reshape(flat).transpose(1, 2),
                       out_dtype=torch.float32).view(*shape[:2], ngroups, chunk, chunk)
    else:
        cb = c.float() @ b.float().transpose(-1, -2)
    if seq_idx is not None:
        ids = seq_idx.view(batch, seqlen // chunk, 1, chunk)
        cb = cb.masked_fill(ids.unsqueeze(-1) != ids.unsqueeze(-2), 0.0)
    return cb.contiguous()


def forward(x: Any, dt: Any, A: Any, B: Any, C: Any, D: Any, z: Any, dt_bias: Any,
            initial_states: Any, seq_idx: Any, call: SSDCall) -> tuple[Any, Any, Any]:
    """(out, ungated out or an empty tensor, final_states) of the tuned kernels."""
    import torch

    x, B, C = (t.contiguous() for t in (x, B, C))
    z = z.contiguous() if z is not None else None
    packed = [seq_idx.to(torch.int32).contiguous()] if seq_idx is not None else []
    dt_chunks, da_cumsum = chunk_steps(dt, dt_bias, A, call.chunk_size, call.dt_softplus,
                                       call.dt_limit)
    state_inputs = [B, x, dt_chunks, da_cumsum]
    if initial_states is not None:
        state_inputs.append(initial_states.float().contiguous())
    states, final_states = KERNELS[call.state_kernel](*state_inputs, *packed)
    scan = KERNELS[call.scan_kernel]
    states = states.to(_input_dtype(scan, "states", torch))
    skip = (D if D is not None else x.new_zeros(x.shape[2])).float().contiguous()
    gram = B if computes_cb(scan) else chunk_gram(C, B, call.chunk_size, seq_idx)
    scan_inputs = [gram, x, dt_chunks, da_cumsum, C, states, skip]
    if z is not None and call.gate_in_kernel:
        return scan(*scan_inputs, z, *packed), x.new_empty(0), final_states
    ungated = scan(*scan_inputs, *packed)
    if z is None:
        return ungated, x.new_empty(0), final_states
    return ungated * torch.nn.functional.silu(z), ungated, final_states


def computes_cb(scan_kernel: Any) -> bool:
    """Whether a chunk-scan kernel computes ``C Bᵀ`` in its tile (it takes ``b``, not
    ``cb``)."""
    return any(t.name == "b" for t in scan_kernel.inputs)


def _input_dtype(kernel: Any, name: str, torch: Any) -> Any:
    """The torch dtype the kernel takes input ``name`` in."""
    (spec,) = [t for t in kernel.inputs if t.name == name]
    return getattr(torch, spec.dtype)


#: The registered operator (a plain global, which a ``torch.compile`` trace reads).
_OPERATOR: list[Any] = []

_SCHEMA = ("(Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, "
           "Tensor? dt_bias, Tensor? initial_states, Tensor? seq_idx, int chunk_size, "
           "bool dt_softplus, float dt_min, float dt_max, str state_kernel, str scan_kernel, "
           "bool gate_in_kernel) -> (Tensor, Tensor, Tensor)")


def operator() -> Any:
    """``pipetune::mamba_chunk_scan_combined``, registered on first use (before a
    ``torch.compile`` trace reaches it: registering inside one is refused)."""
    if not _OPERATOR:
        _OPERATOR.append(_register())
    return _OPERATOR[0]


def combined(x: Any, dt: Any, A: Any, B: Any, C: Any, D: Any, z: Any, dt_bias: Any,
             initial_states: Any, call: SSDCall, seq_idx: Any = None) -> tuple[Any, Any]:
    """(out, final_states) of ``mamba_chunk_scan_combined`` through the operator."""
    low, high = call.dt_limit
    out, _, final_states = operator()(
        x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, call.chunk_size,
        call.dt_softplus,
        float(low), float(high), call.state_kernel, call.scan_kernel, call.gate_in_kernel)
    return out, final_states


def _register() -> Any:
    import torch

    @torch.library.custom_op("pipetune::mamba_chunk_scan_combined", mutates_args=(),
                             schema=_SCHEMA)
    def op(x: Any, dt: Any, A: Any, B: Any, C: Any, D: Any, z: Any, dt_bias: Any,
           initial_states: Any, seq_idx: Any, chunk_size: int, dt_softplus: bool,
           dt_min: float, dt_max: float, state_kernel: str, scan_kernel: str,
           gate_in_kernel: bool) -> tuple[Any, Any, Any]:
        call = SSDCall(chunk_size, dt_softplus, (dt_min, dt_max), state_kernel, scan_kernel,
                       gate_in_kernel)
        return forward(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, call)

    @op.register_fake
    def _(x: Any, dt: Any, A: Any, B: Any, C: Any, D: Any, z: Any, *rest: Any) -> Any:
        batch, _, nheads, headdim = x.shape
        ungated = x.new_empty(x.shape if z is not None and not rest[-1] else (0,))
        final = x.new_empty((batch, nheads, headdim, B.shape[-1]), dtype=torch.float32)
        return torch.empty_like(x), ungated, final

    op.register_autograd(_upstream_gradients, setup_context=_keep_for_backward)
    return op


def _keep_for_backward(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
    x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, chunk, softplus, low, high = (
        inputs[:14])
    out, ungated, _ = output
    # Upstream's backward reads the output before the gate.
    ctx.save_for_backward(ungated if z is not None else out, x, dt, A, B, C, D, z, dt_bias,
                          initial_states, seq_idx)
    ctx.chunk_size, ctx.dt_softplus, ctx.dt_limit = chunk, softplus, (low, high)


def _upstream_gradients(ctx: Any, dout: Any, _dungated: Any, dfinal: Any) -> tuple[Any, ...]:
    backward = upstream_backward()
    out, x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx = ctx.saved_tensors
    grads = backward(dout.contiguous(), x, dt, A, B, C, out, ctx.chunk_size, D=D, z=z,
                     dt_bias=dt_bias, initial_states=initial_states, dfinal_states=dfinal,
                     seq_idx=seq_idx, dt_softplus=ctx.dt_softplus, dt_limit=ctx.dt_limit)
    dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinitial = grads[:9]
    return (dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinitial, *([None] * 8))


def upstream_backward() -> Any:
    """``mamba_ssm``'s ``_mamba_chunk_scan_combined_bwd``, or a clear error without it."""
    try:
        from mamba_ssm.ops.triton.ssd_combined import _mamba_chunk_scan_combined_bwd
    except ImportError as exc:
        raise RuntimeError(
            "pipetune.torch.mamba_chunk_scan_combined: the backward is mamba_ssm's "
            f"(_mamba_chunk_scan_combined_bwd), which is not importable here ({exc}); "
            "install mamba_ssm to train through this op") from exc
    return _mamba_chunk_scan_combined_bwd


def upstream_forward() -> Any:
    """``mamba_ssm``'s ``mamba_chunk_scan_combined`` (the op on a miss), or None."""
    try:
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
    except ImportError:
        return None
    return mamba_chunk_scan_combined


def check_shapes(x: Any, dt: Any, A: Any, B: Any, C: Any, D: Any, z: Any,
                 initial_states: Any) -> None:
    """Upstream's shape contract, as a ValueError naming the argument that breaks it."""
    if x.dim() != 4:
        raise ValueError(f"x: expected (batch, seqlen, nheads, headdim), got {tuple(x.shape)}")
    batch, seqlen, nheads, headdim = x.shape
    wanted = {"dt": (dt, (batch, seqlen, nheads)), "A": (A, (nheads,)),
              "C": (C, tuple(B.shape)), "z": (z, tuple(x.shape))}
    if B.dim() != 4 or tuple(B.shape[:2]) != (batch, seqlen) or nheads % B.shape[2]:
        raise ValueError(f"B: expected (batch, seqlen, ngroups, dstate) with ngroups dividing "
                         f"nheads={nheads}, got {tuple(B.shape)}")
    if initial_states is not None:
        wanted["initial_states"] = (initial_states, (batch, nheads, headdim, B.shape[3]))
    for name, (tensor, shape) in wanted.items():
        if tensor is not None and tuple(tensor.shape) != shape:
            raise ValueError(f"{name}: expected shape {shape}, got {tuple(tensor.shape)}")
    if D is not None and tuple(D.shape) not in ((nheads,), (nheads, headdim)):
        raise ValueError(f"D: expected ({nheads},) or ({nheads}, {headdim}), got "
                         f"{tuple(D.shape)}")


def workloads(x: Any, B: Any, chunk_size: int, D: Any, initial_states: Any, gated: bool,
              states_in_fp32: bool, packed: bool = False) -> Any:
    """The ``mamba2_ssd`` pipeline spec of a call (its kernels: the chunk state with the
    state passing, the chunk scan reading ``cb`` and the one computing it in its tile), or
    None where the kernels do not serve it (not 16-bit, a ragged last chunk, a shape the
    kernels' specs refuse)."""
    from pydantic import ValidationError

    from scheduler_search.ops.mamba2_ssd import Mamba2SSDSpec

    dtype = str(x.dtype).removeprefix("torch.")
    batch, seqlen, nheads, headdim = x.shape
    if dtype not in ("float16", "bfloat16") or str(B.dtype) != str(x.dtype) or seqlen % chunk_size:
        return None
    try:
        return Mamba2SSDSpec(
            batch=batch, seqlen=seqlen, nheads=nheads, headdim=headdim, dstate=B.shape[3],
            ngroups=B.shape[2], chunk_size=chunk_size, dtype=dtype, seq_idx=packed, z=gated,
            d_per_channel=D is not None and D.dim() == 2,
            initial_states=initial_states is not None, states_in_fp32=states_in_fp32)
    except ValidationError:
        return None


def fused_is_faster(fused: dict[str, Any] | None, unfused: dict[str, Any] | None) -> bool:
    """Whether the scan computing ``C Bᵀ`` in its tile makes the faster forward, from the
    cache's figures of the two scans (``cached_figures``: latency, the run's peer): the
    ``mamba2_ssd`` pipeline's choice of plan (the chunk state is the same in both).

    The unfused forward pays the scan plus the product that writes ``cb``
    (:func:`scheduler_search.ops.mamba2_ssd.gram_latency_us`: the two runs' peers tell its
    cost); without both peers' figures the fused scan must beat the unfused scan alone;
    without any figures (a lookup that has none) it is taken, as where it alone is
    cached."""
    from scheduler_search.ops.mamba2_ssd import gram_latency_us

    if fused is None or unfused is None:
        return True
    return fused["latency_us"] < unfused["latency_us"] + gram_latency_us(fused, unfused)


__all__ = ["SSDCall", "check_shapes", "chunk_gram", "chunk_steps", "combined", "computes_cb",
           "forward", "fused_is_faster", "operator", "upstream_backward",
           "upstream_forward", "workloads"]
