"""``pipetune.torch.mamba_chunk_scan_combined`` on a GPU, its kernels generated here (the
operators' designs, where valid, else a sampled schedule): the forward with every option a
Mamba2 layer passes (D per channel, z, dt_bias with softplus, dt_limit, initial states)
against the fp32 reference and against mamba_ssm's op; captured in a CUDA graph; and a
Mamba2 block (in_proj, causal conv, SSD, gated RMSNorm, out_proj in plain PyTorch) with the
drop-in against the same block on mamba_ssm's Triton path (issue 50).

Run with ``pytest tests/pipetune -m gpu`` (mamba_ssm's Triton kernels on PYTHONPATH for
the comparisons with it); skipped without a GPU."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from gpu import cuda_device_visible

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not cuda_device_visible(), reason="needs a CUDA GPU")]

SHAPE = {"batch": 2, "seqlen": 512, "nheads": 8, "headdim": 64, "dstate": 64, "ngroups": 2,
         "chunk_size": 128, "dtype": "bfloat16"}
#: fp32 reference against bf16 inputs and outputs: the suite's bound for bf16 kernels.
BOUND = 2e-2


def _artifact(op: str, params: dict[str, Any]) -> dict[str, Any]:
    """A valid schedule of ``op`` at ``params``: its design, else a sampled one, rendered."""
    from schedule_samples import sample_schedules

    from codegen import feasibility, render
    from scheduler_search.hardware import get_device
    from scheduler_search.ops import parse_spec
    from scheduler_search.space import ScheduleSpace
    from scheduler_search.space.designs import MAMBA2_CHUNK_SCAN, MAMBA2_CHUNK_STATE

    spec, device = parse_spec(op, params), get_device("h200")
    design = MAMBA2_CHUNK_STATE if op == "mamba2_chunk_state" else MAMBA2_CHUNK_SCAN
    sprogram, validity = ScheduleSpace(spec, device, feasibility(op, device)).build(design)
    if not validity.ok:
        sprogram = next(iter(sample_schedules(spec, device, 1, seed=1)))
    return render(sprogram, spec, device).to_dict()


def _drop_ins(torch: Any, gated: bool, per_channel: bool, initial: bool,
              fp32_states: bool = False, packed: bool = False, cb_in_tile: bool = False) -> Any:
    """Drop-ins whose cache holds the two kernels of SHAPE for these options alone (the
    scan computing C Bᵀ in its tile with ``cb_in_tile``)."""
    import pipetune.torch as pt
    from scheduler_search.ops import parse_spec

    state = {**SHAPE, "pass_states": True, "initial_states": initial,
             "states_in_fp32": fp32_states, "seq_idx": packed}
    scan = {**SHAPE, "z": gated, "d_per_channel": per_channel, "seq_idx": packed,
            **({"cb_in_tile": True} if cb_in_tile else {})}
    cached = {(op, json_key(parse_spec(op, p).params())): _artifact(op, p)
              for op, p in (("mamba2_chunk_state", state), ("mamba2_chunk_scan", scan))}
    return pt.DropIns(lookup=lambda op, p, _: cached.get(
        (op, json_key(parse_spec(op, p).params()))))


def json_key(params: dict[str, Any]) -> str:
    import json

    return json.dumps(params, sort_keys=True)


def _inputs(torch: Any, seed: int, per_channel: bool) -> dict[str, Any]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    b, s, h, p, n, groups = (SHAPE[k] for k in ("batch", "seqlen", "nheads", "headdim",
                                                 "dstate", "ngroups"))

    def randn(*shape: int, scale: float = 1.0, dtype: Any = torch.bfloat16) -> Any:
        return (torch.randn(shape, generator=g, device="cuda") * scale).to(dtype)

    return {"x": randn(b, s, h, p), "dt": randn(b, s, h, scale=0.5) - 2.0,
            "A": -torch.rand(h, generator=g, device="cuda") * 4 - 0.5,
            "B": randn(b, s, groups, n, scale=0.5), "C": randn(b, s, groups, n, scale=0.5),
            "D": randn(*((h, p) if per_channel else (h,)), dtype=torch.float32),
            "z": randn(b, s, h, p), "dt_bias": randn(h, scale=0.5, dtype=torch.float32),
            "initial_states": randn(b, h, p, n, scale=0.5, dtype=torch.float32)}


def _rel(ours: Any, want: Any) -> float:
    ours, want = np.asarray(ours, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return float(np.linalg.norm(ours - want) / np.linalg.norm(want))


def _packed(torch: Any) -> Any:
    """seq_idx of SHAPE: row 0 packs three sequences (one starting on a chunk), row 1 one."""
    seqlen, chunk = SHAPE["seqlen"], SHAPE["chunk_size"]
    row = torch.zeros(seqlen, dtype=torch.int32)
    row[chunk:] += 1
    row[chunk + 77:] += 1
    return torch.stack([row, torch.zeros_like(row)]).cuda()


@pytest.mark.parametrize(("gated", "per_channel", "initial", "limit", "packed", "cb_in_tile"), [
    (True, True, True, (0.0, math.inf), False, False),
    (False, False, False, (0.0, math.inf), False, False),
    (True, False, True, (0.01, 0.2), False, False),
    (True, True, True, (0.0, math.inf), True, False),
    (True, True, True, (0.0, math.inf), False, True),
    (False, False, True, (0.0, math.inf), True, True),
])
def test_forward_matches_the_reference(gated: bool, per_channel: bool, initial: bool,
                                       limit: tuple[float, float], packed: bool,
                                       cb_in_tile: bool) -> None:
    import torch

    from workers import ssd_reference as ref

    t = _inputs(torch, 5, per_channel)
    drop = _drop_ins(torch, gated, per_channel, initial, packed=packed, cb_in_tile=cb_in_tile)
    options = {"D": t["D"], "z": t["z"] if gated else None, "dt_bias": t["dt_bias"],
               "initial_states": t["initial_states"] if initial else None,
               "seq_idx": _packed(torch) if packed else None,
               "dt_softplus": True, "dt_limit": limit}
    with torch.no_grad():
        out, final = drop.mamba_chunk_scan_combined(
            *(t[n] for n in ("x", "dt", "A", "B", "C")), SHAPE["chunk_size"],
            return_final_states=True, **options)
    host = {n: (v.float().cpu().numpy() if v is not None and hasattr(v, "cpu") else v)
            for n, v in options.items()}
    want, want_final = ref.ssd_forward(
        np, *(t[n].float().cpu().numpy() for n in ("x", "dt", "A", "B", "C")),
        SHAPE["chunk_size"], **host)
    assert _rel(out.float().cpu(), want) < BOUND
    assert _rel(final.cpu(), want_final) < BOUND


def test_forward_agrees_with_mamba_ssm_and_is_captured_by_a_cuda_graph() -> None:
    import torch

    peer = pytest.importorskip("mamba_ssm.ops.triton.ssd_combined")
    t = _inputs(torch, 7, True)
    drop = _drop_ins(torch, True, True, True)
    args = [t[n] for n in ("x", "dt", "A", "B", "C")]
    options = {n: t[n] for n in ("D", "z", "dt_bias", "initial_states")}

    def ours() -> Any:
        return drop.mamba_chunk_scan_combined(*args, SHAPE["chunk_size"], dt_softplus=True,
                                              return_final_states=True, **options)

    with torch.no_grad():
        out, final = ours()
        want, want_final = peer.mamba_chunk_scan_combined(
            *args, SHAPE["chunk_size"], dt_softplus=True, return_final_states=True, **options)
        assert _rel(out.float().cpu(), want.float().cpu()) < BOUND
        assert _rel(final.cpu(), want_final.float().cpu()) < BOUND
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            ours()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured, _ = ours()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, out)


def _block_forward(torch: Any, w: dict[str, Any], u: Any, ssd: Any) -> Any:
    """A Mamba2 block's math (mamba_ssm's Mamba2 without fused kernels): in_proj, the
    causal depthwise conv and SiLU on (x, B, C), the SSD by ``ssd``, the gated RMSNorm
    (y silu(z), normalised), out_proj."""
    b, s, _ = u.shape
    h, p, n, g = (SHAPE[k] for k in ("nheads", "headdim", "dstate", "ngroups"))
    zxbcdt = u @ w["in_proj"].t()
    z, xbc, dt = torch.split(zxbcdt, [h * p, h * p + 2 * g * n, h], dim=-1)
    conv = torch.nn.functional.conv1d(xbc.transpose(1, 2), w["conv"], padding=3,
                                      groups=xbc.shape[-1])[..., :s]
    xbc = torch.nn.functional.silu(conv).transpose(1, 2)
    x, B, C = torch.split(xbc, [h * p, g * n, g * n], dim=-1)
    y = ssd(x.reshape(b, s, h, p).contiguous(), dt.contiguous(), -torch.exp(w["A_log"]),
            B.reshape(b, s, g, n).contiguous(), C.reshape(b, s, g, n).contiguous(),
            SHAPE["chunk_size"], D=w["D"], dt_bias=w["dt_bias"], dt_softplus=True)
    gated = (y.reshape(b, s, h * p) * torch.nn.functional.silu(z)).float()
    normed = gated * torch.rsqrt(gated.pow(2).mean(-1, keepdim=True) + 1e-5)
    return (normed.to(u.dtype) * w["norm"]) @ w["out_proj"].t()


def test_a_mamba2_block_gives_the_triton_path_s_output() -> None:
    import torch

    peer = pytest.importorskip("mamba_ssm.ops.triton.ssd_combined")
    h, p, n, g = (SHAPE[k] for k in ("nheads", "headdim", "dstate", "ngroups"))
    width, inner = 256, h * p
    gen = torch.Generator(device="cuda").manual_seed(13)

    def param(*shape: int, scale: float, dtype: Any = torch.bfloat16) -> Any:
        return (torch.randn(shape, generator=gen, device="cuda") * scale).to(dtype)

    w = {"in_proj": param(2 * inner + 2 * g * n + h, width, scale=width ** -0.5),
         "conv": param(inner + 2 * g * n, 1, 4, scale=0.5),
         "A_log": torch.log(torch.rand(h, generator=gen, device="cuda") * 15 + 1),
         "D": torch.ones(h, device="cuda"), "dt_bias": param(h, scale=0.5, dtype=torch.float32),
         "norm": torch.ones(inner, device="cuda", dtype=torch.bfloat16),
         "out_proj": param(width, inner, scale=inner ** -0.5)}
    u = param(SHAPE["batch"], SHAPE["seqlen"], width, scale=1.0)
    drop = _drop_ins(torch, False, False, False)
    with torch.no_grad():
        ours = _block_forward(torch, w, u, drop.mamba_chunk_scan_combined)
        theirs = _block_forward(torch, w, u, peer.mamba_chunk_scan_combined)
    assert _rel(ours.float().cpu(), theirs.float().cpu()) < BOUND


def test_a_tuned_pipeline_serves_the_drop_in(tmp_path) -> None:
    """``pipetune.tune("mamba2_ssd")`` on this GPU from an empty cache: every kernel
    checked and timed, the plan served named; the drop-in on that cache gives the
    reference's output through the plan's scan."""
    import torch

    import pipetune
    import pipetune.torch as pt
    from workers import ssd_reference as ref

    database = f"sqlite:///{tmp_path / 'ssd.db'}"
    result = pipetune.tune("mamba2_ssd", device="cuda:0", budget={"trials": 6},
                           database_url=database, progress=False, **SHAPE)
    pipeline = result.pipeline
    assert pipeline is not None and pipeline["plan"] in ("cb", "cb_in_tile"), pipeline
    assert all(k["schedule"]["timing_method"] for k in pipeline["kernels"])
    assert result.latency_us == pipeline["plans"][pipeline["plan"]]["latency_us"] > 0
    t = _inputs(torch, 11, False)
    with torch.no_grad():
        out = pt.DropIns(database_url=database).mamba_chunk_scan_combined(
            *(t[n] for n in ("x", "dt", "A", "B", "C")), SHAPE["chunk_size"], D=t["D"])
    want, _ = ref.ssd_forward(np, *(t[n].float().cpu().numpy()
                                    for n in ("x", "dt", "A", "B", "C")),
                              SHAPE["chunk_size"], D=t["D"].cpu().numpy())
    assert _rel(out.float().cpu(), want) < BOUND
