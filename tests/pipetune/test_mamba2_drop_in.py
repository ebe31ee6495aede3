"""``pipetune.torch.mamba_chunk_scan_combined`` on the CPU with PyTorch: the glue around
the tuned kernels (step sizes, chunk cumsum, C Bᵀ, states' dtype, D and the gate) against
the fp32 reference of the whole forward; the operator traced by ``torch.compile``; its
gradients handed to mamba_ssm's backward with the ungated output; and the drop-in's
routing (the kernels' workloads, a miss, what the kernels do not serve). Stand-in kernels
compute what the tuned ones do with :mod:`workers.ssd_reference`."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import pipetune.torch as pt  # noqa: E402
from pipetune import _kernel_registry as registry  # noqa: E402
from pipetune import _mamba2 as ssd  # noqa: E402
from workers import ssd_reference as ref  # noqa: E402

BATCH, SEQLEN, NHEADS, HEADDIM, DSTATE, NGROUPS, CHUNK = 2, 48, 4, 16, 16, 2, 16


def _np(t: Any) -> Any:
    return t.detach().double().numpy()


class _Kernel:
    """A stand-in tuned kernel: its contract's input dtypes and a schedule hash."""

    def __init__(self, name: str, run: Any, states_dtype: str, calls: list,
                 first_input: str = "cb") -> None:
        self.artifact = SimpleNamespace(schedule_hash=name)
        self.inputs = [SimpleNamespace(name=first_input, dtype="float32"),
                       SimpleNamespace(name="states", dtype=states_dtype)]
        self._run, self._calls = run, calls

    def __call__(self, *tensors: Any) -> Any:
        self._calls.append((self.artifact.schedule_hash, tensors))
        return self._run(*tensors)


def _optional(tensors: tuple[Any, ...], integer: bool) -> Any:
    """The optional input among ``tensors`` that is (or is not) the int32 seq_idx."""
    found = [t for t in tensors if (t.dtype == torch.int32) == integer]
    return _np(found[0]) if found else None


def _state_kernel(states_dtype: Any, calls: list) -> _Kernel:
    def run(b: Any, x: Any, dt: Any, da: Any, *optional: Any) -> Any:
        initial, seq_idx = _optional(optional, False), _optional(optional, True)
        states = ref.chunk_states(np, _np(x), _np(b), _np(dt), _np(da), seq_idx)
        entering, final = ref.state_passing(np, states, _np(da)[..., -1], initial, seq_idx,
                                            CHUNK)
        return (torch.from_numpy(entering).to(states_dtype),
                torch.from_numpy(final).float())
    return _Kernel(f"state-{len(calls)}", run, "float32", calls)


def _scan_kernel(calls: list, cb_in_tile: bool = False) -> _Kernel:
    """The chunk scan, reading cb, or (``cb_in_tile``) B, computing cb itself."""
    def run(gram: Any, x: Any, dt: Any, da: Any, c: Any, states: Any, d: Any,
            *optional: Any) -> Any:
        assert states.dtype == torch.float32 and d.dtype == torch.float32
        seq_idx = _optional(optional, True)
        cb = ref.chunk_cb(np, _np(c), _np(gram), CHUNK, seq_idx) if cb_in_tile else _np(gram)
        out = ref.chunk_scan(np, cb, _np(x), _np(dt), _np(da), _np(c), _np(states), _np(d),
                             _optional(optional, False), seq_idx)
        return torch.from_numpy(out).to(x.dtype)
    first_input = "b" if cb_in_tile else "cb"
    return _Kernel(f"scan-{first_input}-{len(calls)}", run, "float32", calls, first_input)


def _inputs(seed: int = 3, per_channel_d: bool = False, grad: bool = False) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)

    def randn(*shape: int, scale: float = 1.0) -> Any:
        return (torch.randn(shape, generator=g) * scale).requires_grad_(grad)

    return {
        "x": randn(BATCH, SEQLEN, NHEADS, HEADDIM), "dt": randn(BATCH, SEQLEN, NHEADS),
        "A": (-torch.rand(NHEADS, generator=g) - 0.5).requires_grad_(grad),
        "B": randn(BATCH, SEQLEN, NGROUPS, DSTATE, scale=0.5),
        "C": randn(BATCH, SEQLEN, NGROUPS, DSTATE, scale=0.5),
        "D": randn(*((NHEADS, HEADDIM) if per_channel_d else (NHEADS,))),
        "z": randn(BATCH, SEQLEN, NHEADS, HEADDIM),
        "dt_bias": randn(NHEADS, scale=0.1),
        "initial_states": randn(BATCH, NHEADS, HEADDIM, DSTATE, scale=0.5),
    }


def _call(calls: list, states_dtype: Any = torch.float32, gate_in_kernel: bool = True,
          limit: tuple[float, float] = (0.0, float("inf"))) -> ssd.SSDCall:
    state = registry.register(_state_kernel(states_dtype, calls))
    scan = registry.register(_scan_kernel(calls))
    return ssd.SSDCall(CHUNK, True, limit, state, scan, gate_in_kernel)


def _reference(t: dict[str, Any], limit: tuple[float, float] = (0.0, float("inf")),
               seq_idx: Any = None) -> Any:
    return ref.ssd_forward(np, *(_np(t[n]) for n in ("x", "dt", "A", "B", "C")), CHUNK,
                           D=_np(t["D"]), z=_np(t["z"]), dt_bias=_np(t["dt_bias"]),
                           initial_states=_np(t["initial_states"]), dt_softplus=True,
                           dt_limit=limit, seq_idx=seq_idx)


#: Three sequences in the first row (one starting on a chunk), one in the second.
SEQ_IDX = torch.tensor([[0] * 16 + [1] * 10 + [2] * 22, [0] * 48], dtype=torch.int32)


@pytest.mark.parametrize(("per_channel_d", "gate_in_kernel", "limit"), [
    (False, True, (0.0, float("inf"))), (True, False, (0.0, float("inf"))),
    (False, False, (0.3, 0.9)),
])
def test_forward_on_the_kernels_is_the_combined_ssd(per_channel_d: bool, gate_in_kernel: bool,
                                                    limit: tuple[float, float]) -> None:
    t = _inputs(per_channel_d=per_channel_d)
    calls: list = []
    out, final = ssd.combined(*(t[n] for n in ("x", "dt", "A", "B", "C", "D", "z", "dt_bias",
                                               "initial_states")),
                              _call(calls, gate_in_kernel=gate_in_kernel, limit=limit))
    want_out, want_final = _reference(t, limit)
    np.testing.assert_allclose(_np(out), want_out, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(_np(final), want_final, rtol=1e-4, atol=1e-4)
    (_, state_args), (_, scan_args) = calls
    assert len(state_args) == 5 and state_args[4].dtype == torch.float32  # initial states
    assert len(scan_args) == (8 if gate_in_kernel else 7)  # z only to a gating kernel
    assert scan_args[0].shape == (BATCH, SEQLEN // CHUNK, NGROUPS, CHUNK, CHUNK)


def test_packed_sequences_reach_both_kernels_and_mask_c_b() -> None:
    t = _inputs(seed=9)
    calls: list = []
    out, final = ssd.combined(*(t[n] for n in ("x", "dt", "A", "B", "C", "D", "z", "dt_bias",
                                               "initial_states")), _call(calls), SEQ_IDX)
    want_out, want_final = _reference(t, seq_idx=SEQ_IDX.numpy())
    np.testing.assert_allclose(_np(out), want_out, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(_np(final), want_final, rtol=1e-4, atol=1e-4)
    (_, state_args), (_, scan_args) = calls
    assert state_args[-1].dtype == torch.int32 and scan_args[-1].dtype == torch.int32
    cb = scan_args[0]
    assert float(cb[0, 1, :, :10, 10:].abs().max()) == 0  # positions 16-25 against 26-31


def test_16_bit_states_are_taken_in_the_dtype_the_scan_kernel_reads() -> None:
    t = _inputs()
    calls: list = []
    call = _call(calls, states_dtype=torch.bfloat16)
    out, _ = ssd.combined(*(t[n] for n in ("x", "dt", "A", "B", "C")), None, None, None, None,
                          call)
    want, _ = ref.ssd_forward(np, *(_np(t[n]) for n in ("x", "dt", "A", "B", "C")), CHUNK,
                              dt_softplus=True)
    # The entering states rounded to bf16 on the way (2^-8 relative).
    np.testing.assert_allclose(_np(out), want, rtol=0.02, atol=0.02)
    assert calls[1][1][5].dtype == torch.float32  # converted for the fp32-reading scan


def test_the_operator_traces_with_its_fake_implementation() -> None:
    t = _inputs()
    call = _call([])
    args = [t[n] for n in ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states")]

    def layer(*tensors: Any) -> Any:
        out, final = ssd.combined(*tensors, call)
        return out.sum(-1), final

    ssd.operator()
    compiled = torch.compile(layer, fullgraph=True, backend="eager")
    got, want = compiled(*args), layer(*args)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])


@pytest.fixture
def upstream(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """A stand-in ``mamba_ssm.ops.triton.ssd_combined``: its backward records what it is
    given and returns a gradient per differentiable input; its forward records its call."""
    seen: list[dict[str, Any]] = []

    def backward(dout: Any, x: Any, dt: Any, A: Any, B: Any, C: Any, out: Any, chunk: int,
                 **kw: Any) -> tuple[Any, ...]:
        seen.append({"out": out, "chunk": chunk, **kw})
        return tuple(torch.full_like(v, 2.0) if v is not None else None for v in (
            x, dt, A, B, C, kw["D"], kw["z"], kw["dt_bias"], kw["initial_states"]))

    def forward(*args: Any, **kw: Any) -> str:
        seen.append({"forward": args, **kw})
        return "upstream"

    module = types.ModuleType("mamba_ssm.ops.triton.ssd_combined")
    module._mamba_chunk_scan_combined_bwd = backward  # type: ignore[attr-defined]
    module.mamba_chunk_scan_combined = forward  # type: ignore[attr-defined]
    for name in ("mamba_ssm", "mamba_ssm.ops", "mamba_ssm.ops.triton"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "mamba_ssm.ops.triton.ssd_combined", module)
    return seen


def test_gradients_are_mamba_ssm_s_given_the_ungated_output(upstream: list) -> None:
    t = _inputs(grad=True)
    out, _ = ssd.combined(*(t[n] for n in ("x", "dt", "A", "B", "C", "D", "z", "dt_bias",
                                           "initial_states")),
                          _call([], gate_in_kernel=False))
    out.sum().backward()
    (seen,) = upstream
    ungated = out.detach() / torch.nn.functional.silu(t["z"].detach())
    torch.testing.assert_close(seen["out"], ungated, rtol=1e-4, atol=1e-4)
    assert seen["chunk"] == CHUNK and seen["dt_softplus"] is True
    assert seen["dfinal_states"] is None or float(seen["dfinal_states"].abs().sum()) == 0
    for name in ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states"):
        assert torch.equal(t[name].grad, torch.full_like(t[name], 2.0)), name


def test_the_backward_without_mamba_ssm_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mamba_ssm", None)
    t = _inputs(grad=True)
    out, _ = ssd.combined(*(t[n] for n in ("x", "dt", "A", "B", "C")), None, None, None, None,
                          _call([]))
    with pytest.raises(RuntimeError, match="backward is mamba_ssm's"):
        out.sum().backward()


class _Cached(pt.DropIns):
    """Drop-ins whose cache holds the stand-in kernels (and records what was asked):
    the chunk state and the scan in each of ``forms`` ("cb", "in_tile"), with the cache's
    ``figures`` of each scan form."""

    def __init__(self, calls: list, hit: bool = True, forms: tuple[str, ...] = ("cb",),
                 figures: dict[str, dict[str, float]] | None = None) -> None:
        self.figures_asked: list[dict[str, Any]] = []

        def cached_figures(op: str, params: dict[str, Any], device: int) -> Any:
            self.figures_asked.append(params)
            return (figures or {}).get("in_tile" if params.get("cb_in_tile") else "cb")

        super().__init__(lookup=lambda *a: None, figures=cached_figures)
        self.asked: list[tuple[str, dict[str, Any]]] = []
        self._kernels = {"mamba2_chunk_state": _state_kernel(torch.float32, calls)} if hit else {}
        for form in forms if hit else ():
            self._kernels[f"mamba2_chunk_scan+{form}"] = _scan_kernel(calls, form == "in_tile")

    def kernel(self, op: str, params: dict[str, Any], like: Any) -> Any:
        self.asked.append((op, params))
        if op == "mamba2_chunk_scan":
            op += "+in_tile" if params.get("cb_in_tile") else "+cb"
        return self._kernels.get(op)


def _half(t: dict[str, Any]) -> dict[str, Any]:
    return {n: v.detach().to(torch.bfloat16) if n in ("x", "B", "C", "z") else v.detach()
            for n, v in t.items()}


def test_the_drop_in_asks_for_both_kernels_and_runs_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pt, "_on_gpu", lambda tensor: True)
    t, calls = _half(_inputs(per_channel_d=True)), []
    drop_ins = _Cached(calls)
    out, final = drop_ins.mamba_chunk_scan_combined(
        t["x"], t["dt"], t["A"], t["B"], t["C"], CHUNK, D=t["D"], z=t["z"],
        dt_bias=t["dt_bias"], initial_states=t["initial_states"], dt_softplus=True,
        return_final_states=True)
    # The scan computing C B^T in its tile first; cached is the one reading cb.
    (state_op, state), (fused_op, fused), (scan_op, scan) = drop_ins.asked
    assert (state_op, fused_op, scan_op) == ("mamba2_chunk_state", *["mamba2_chunk_scan"] * 2)
    assert fused == {**scan, "cb_in_tile": True}
    shape = {"batch": BATCH, "seqlen": SEQLEN, "nheads": NHEADS, "headdim": HEADDIM,
             "dstate": DSTATE, "ngroups": NGROUPS, "chunk_size": CHUNK, "dtype": "bfloat16"}
    assert state == {**shape, "pass_states": True, "initial_states": True,
                     "states_in_fp32": False}
    assert scan == {**shape, "z": True, "d_per_channel": True}  # no gradients: gate fused
    want_out, want_final = _reference({n: v.float() for n, v in t.items()})
    np.testing.assert_allclose(_np(out), want_out, rtol=0.03, atol=0.03)
    np.testing.assert_allclose(_np(final), want_final, rtol=1e-3, atol=1e-3)


def test_a_miss_or_varlen_states_run_mamba_ssm_s_op(
        monkeypatch: pytest.MonkeyPatch, upstream: list) -> None:
    monkeypatch.setattr(pt, "_on_gpu", lambda tensor: True)
    t = _half(_inputs())
    cu_seqlens = torch.tensor([0, SEQLEN], dtype=torch.int32)
    for drop_ins, extra in ((_Cached([], hit=False), {}),
                            (_Cached([]), {"cu_seqlens": cu_seqlens,
                                           "return_varlen_states": True})):
        got = drop_ins.mamba_chunk_scan_combined(t["x"], t["dt"], t["A"], t["B"], t["C"],
                                                 CHUNK, **extra)
        assert got == "upstream"
        assert upstream[-1]["cu_seqlens"] is extra.get("cu_seqlens")
        assert [op for op, _ in drop_ins.asked] == (
            [] if extra else ["mamba2_chunk_state", "mamba2_chunk_scan", "mamba2_chunk_scan"])


def test_packed_sequences_ask_for_kernels_that_take_seq_idx(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pt, "_on_gpu", lambda tensor: True)
    t, calls = _half(_inputs()), []
    drop_ins = _Cached(calls)
    drop_ins.mamba_chunk_scan_combined(t["x"], t["dt"], t["A"], t["B"], t["C"], CHUNK,
                                       seq_idx=SEQ_IDX)
    assert [params["seq_idx"] for _, params in drop_ins.asked] == [True, True, True]
    assert calls[0][1][-1] is not None and calls[0][1][-1].dtype == torch.int32


@pytest.mark.parametrize("packed", [False, True])
def test_a_scan_computing_c_b_in_its_tile_is_given_b(monkeypatch: pytest.MonkeyPatch,
                                                     packed: bool) -> None:
    """Where the cache holds the scan with cb_in_tile, it runs on B itself (no C Bᵀ in
    PyTorch), with seq_idx when the sequences are packed, and gives the combined SSD."""
    monkeypatch.setattr(pt, "_on_gpu", lambda tensor: True)
    t, calls = _half(_inputs(seed=5)), []
    seq_idx = SEQ_IDX if packed else None
    drop_ins = _Cached(calls, forms=("in_tile",))
    out, final = drop_ins.mamba_chunk_scan_combined(
        t["x"], t["dt"], t["A"], t["B"], t["C"], CHUNK, D=t["D"], z=t["z"],
        dt_bias=t["dt_bias"], initial_states=t["initial_states"], dt_softplus=True,
        seq_idx=seq_idx, return_final_states=True)
    assert [op for op, _ in drop_ins.asked] == ["mamba2_chunk_state", *["mamba2_chunk_scan"] * 2]
    assert drop_ins.figures_asked == []  # one form cached: nothing to choose
    (_, scan_args) = calls[1]
    assert scan_args[0] is t["B"] or torch.equal(scan_args[0], t["B"])
    want_out, want_final = _reference({n: v.float() for n, v in t.items()},
                                      seq_idx=None if seq_idx is None else seq_idx.numpy())
    np.testing.assert_allclose(_np(out), want_out, rtol=0.03, atol=0.03)
    np.testing.assert_allclose(_np(final), want_final, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(("fused_us", "unfused_us", "fused_peer_us", "unfused_peer_us",
                          "fused_serves"), [
    (900.0, 800.0, 1500.0, 1300.0, True),    # 800 + the 200 us cb costs the peer > 900
    (900.0, 800.0, 1350.0, 1300.0, False),   # 800 + 50 < 900
    (900.0, 800.0, None, 1300.0, False),     # no cb cost known: the bare scan is faster
    (700.0, 800.0, None, None, True),
])
def test_with_both_scans_cached_the_faster_forward_by_the_cache_s_figures_serves(
        monkeypatch: pytest.MonkeyPatch, fused_us: float, unfused_us: float,
        fused_peer_us: float | None, unfused_peer_us: float | None,
        fused_serves: bool) -> None:
    """The fused scan against the unfused one plus what the product writing cb costs
    (the difference of the two runs' peers: the fused scan's peer runs upstream's
    _bmm_chunk_fwd first); the choice is asked of the cache once per workload."""
    monkeypatch.setattr(pt, "_on_gpu", lambda tensor: True)
    t, calls = _half(_inputs(seed=7)), []
    figures = {"in_tile": {"latency_us": fused_us, "baseline_latency_us": fused_peer_us},
               "cb": {"latency_us": unfused_us, "baseline_latency_us": unfused_peer_us}}
    drop_ins = _Cached(calls, forms=("cb", "in_tile"), figures=figures)
    for _ in range(2):
        out, final = drop_ins.mamba_chunk_scan_combined(
            t["x"], t["dt"], t["A"], t["B"], t["C"], CHUNK, D=t["D"], z=t["z"],
            dt_bias=t["dt_bias"], initial_states=t["initial_states"], dt_softplus=True,
            return_final_states=True)
    assert len(drop_ins.figures_asked) == 2  # each form's figures, asked once
    scans = [name for name, _ in calls if name.startswith("scan")]
    assert scans == [f"scan-{'b' if fused_serves else 'cb'}-0"] * 2
    want_out, want_final = _reference({n: v.float() for n, v in t.items()})
    np.testing.assert_allclose(_np(out), want_out, rtol=0.03, atol=0.03)
    np.testing.assert_allclose(_np(final), want_final, rtol=1e-3, atol=1e-3)


def test_without_kernels_or_mamba_ssm_the_error_says_what_to_do(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mamba_ssm", None)
    t = _half(_inputs())
    with pytest.raises(RuntimeError, match="tune mamba2_chunk_state"):
        _Cached([], hit=False).mamba_chunk_scan_combined(t["x"], t["dt"], t["A"], t["B"],
                                                         t["C"], CHUNK)


@pytest.mark.parametrize(("name", "shape"), [
    ("dt", (BATCH, SEQLEN, NHEADS + 1)), ("D", (NHEADS, HEADDIM + 1)),
    ("z", (BATCH, SEQLEN, NHEADS, 1)), ("initial_states", (BATCH, NHEADS, HEADDIM, 1)),
])
def test_shapes_that_disagree_are_named(name: str, shape: tuple[int, ...]) -> None:
    t = {**_inputs(), name: torch.zeros(shape)}
    with pytest.raises(ValueError, match=f"^{name}: expected"):
        _Cached([]).mamba_chunk_scan_combined(
            t["x"], t["dt"], t["A"], t["B"], t["C"], CHUNK, D=t["D"], z=t["z"],
            initial_states=t["initial_states"])
