"""The Mamba2 peers (mamba_ssm's Triton kernels) on a machine without them: unavailable
with a message saying what to install, and, over stand-in torch and mamba_ssm modules
computing the NumPy reference, the wiring of the workload's tensors into the peer's call and
of its result into the workload's output. The GEMM epilogue peers over a stand-in torch
computing in NumPy: which PyTorch calls each makes (cuBLASLt's fused epilogue where it
has one), and that their result is the fp32 reference's."""

from __future__ import annotations

import sys
import types
from typing import Any, ClassVar

import numpy as np
import pytest

from workers import _dtypes, baselines
from workers.baselines import BASELINES, BaselineUnavailable, prepare_baseline
from workers.contract import contract
from workers.inputs import build_inputs
from workers.ssd_reference import chunk_scan
from workers.verify import attention_reference, chunk_state_reference

PARAMS = {"batch": 2, "seqlen": 32, "nheads": 4, "headdim": 16, "dstate": 16, "ngroups": 2,
          "chunk_size": 16, "dtype": "bfloat16"}
PEERS = {"mamba2_chunk_state": "mamba_ssm_chunk_state",
         "mamba2_chunk_scan": "mamba_ssm_chunk_scan"}
MAMBA_MODULES = ("mamba_ssm", "mamba_ssm.ops", "mamba_ssm.ops.triton",
                 "mamba_ssm.ops.triton.ssd_chunk_state", "mamba_ssm.ops.triton.ssd_chunk_scan")


def _workload(op: str, params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    specs = contract(op, params)
    dtypes = {name: spec.default_dtype for name, spec in specs.items()}
    tensors = build_inputs(np, op, params, dtypes, seed=1)
    for name, spec in specs.items():
        if spec.role == "output":
            tensors[name] = np.zeros(spec.shape, _dtypes.storage_dtype(np, dtypes[name]))
            _dtypes.fill_nan(tensors[name], dtypes[name])
    return tensors, dtypes


class _Tensor:
    """A torch tensor as the peer code uses it: a dtype tag over an array of values."""

    def __init__(self, values: np.ndarray, dtype: str) -> None:
        self.values, self.dtype = values, dtype

    def view(self, dtype: str) -> _Tensor:
        assert self.values.dtype == np.uint16 and dtype == "bfloat16"  # bf16 bits, as stored
        return _Tensor(self.values, dtype)

    def float32(self) -> np.ndarray:
        return _dtypes.to_float32(np, self.values, self.dtype)

    def copy_(self, other: _Tensor) -> None:
        np.copyto(self.values, _dtypes.from_float32(np, other.float32(), self.dtype))

    def transpose(self, first: int, second: int) -> _Tensor:
        return _Tensor(np.swapaxes(self.values, first, second), self.dtype)  # a view


class _Torch(types.ModuleType):
    bfloat16 = "bfloat16"

    def __init__(self) -> None:
        super().__init__("torch")

    @staticmethod
    def from_dlpack(array: np.ndarray) -> _Tensor:
        return _Tensor(array, str(array.dtype))


class _Autotuner:
    """A Triton autotuner's state: the config chosen per key."""

    def __init__(self) -> None:
        self.cache: dict[tuple, str] = {}


def _fake_mamba_ssm(calls: list[tuple[str, tuple, dict]]) -> dict[str, types.ModuleType]:
    """mamba_ssm's two entry points with its signatures, computing our fp32 references."""

    def _chunk_state_fwd(b_in: _Tensor, x: _Tensor, dt: _Tensor, da: _Tensor,
                         seq_idx: Any = None, states: Any = None,
                         states_in_fp32: bool = True) -> _Tensor:
        calls.append(("state", (b_in, x, dt, da), {"states_in_fp32": states_in_fp32}))
        assert dt.dtype == da.dtype == "float32" and x.dtype == b_in.dtype
        ref = chunk_state_reference(np, b_in.float32(), x.float32(), dt.float32(), da.float32())
        if states_in_fp32:
            return _Tensor(ref, "float32")
        return _Tensor(_dtypes.from_float32(np, ref, x.dtype), x.dtype)

    def _chunk_scan_fwd(cb: _Tensor, x: _Tensor, dt: _Tensor, da: _Tensor, c_in: _Tensor,
                        states: _Tensor, D: Any = None, z: Any = None,
                        seq_idx: Any = None) -> tuple[_Tensor, None]:
        calls.append(("scan", (cb, x, dt, da, c_in, states), {"D": D, "z": z}))
        assert D is not None and D.values.shape == (x.values.shape[2],)
        ref = chunk_scan(np, cb.float32(), x.float32(), dt.float32(), da.float32(),
                                   c_in.float32(), states.float32(), D.float32())
        out = _Tensor(_dtypes.from_float32(np, ref, x.dtype), x.dtype)
        return out, None  # out in x's dtype; out_x only with z

    modules = {name: types.ModuleType(name) for name in MAMBA_MODULES}
    state, scan = modules["mamba_ssm.ops.triton.ssd_chunk_state"], modules[
        "mamba_ssm.ops.triton.ssd_chunk_scan"]
    state._chunk_state_fwd, state._chunk_state_fwd_kernel = _chunk_state_fwd, _Autotuner()
    scan._chunk_scan_fwd, scan._chunk_scan_fwd_kernel = _chunk_scan_fwd, _Autotuner()
    return modules


@pytest.fixture
def fake_peers(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple, dict]]:
    calls: list[tuple[str, tuple, dict]] = []
    for name, module in _fake_mamba_ssm(calls).items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setitem(sys.modules, "torch", _Torch())
    monkeypatch.setattr(baselines, "_TUNED_FOR", {})
    return calls


def test_mamba2_peers_are_named_for_their_operators() -> None:
    for op, name in PEERS.items():
        assert BASELINES[name].op == op
    tensors, dtypes = _workload("mamba2_chunk_scan", PARAMS)
    with pytest.raises(BaselineUnavailable, match="no baseline 'mamba_ssm_chunk_state'"):
        prepare_baseline("mamba_ssm_chunk_state", "mamba2_chunk_scan", PARAMS, tensors, dtypes)


@pytest.mark.parametrize("op", sorted(PEERS))
def test_peer_without_pytorch_is_unavailable(op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    tensors, dtypes = _workload(op, PARAMS)
    with pytest.raises(BaselineUnavailable, match="PyTorch is not importable"):
        prepare_baseline(PEERS[op], op, PARAMS, tensors, dtypes)


@pytest.mark.parametrize("op", sorted(PEERS))
def test_peer_without_mamba_ssm_says_what_to_put_on_the_path(
    op: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", _Torch())
    for name in MAMBA_MODULES:
        monkeypatch.setitem(sys.modules, name, None)
    tensors, dtypes = _workload(op, PARAMS)
    with pytest.raises(BaselineUnavailable) as raised:
        prepare_baseline(PEERS[op], op, PARAMS, tensors, dtypes)
    message = str(raised.value)
    assert message.startswith(f"{PEERS[op]}: mamba_ssm's Triton kernels are not importable")
    assert "mamba_ssm/ops/triton" in message and "PYTHONPATH" in message


def test_chunk_state_peer_writes_fp32_states_into_the_workload(
    fake_peers: list[tuple[str, tuple, dict]],
) -> None:
    op = "mamba2_chunk_state"
    tensors, dtypes = _workload(op, PARAMS)
    launch, finish = prepare_baseline(PEERS[op], op, PARAMS, tensors, dtypes)
    assert np.isnan(tensors["states"]).all()  # nothing written before the launch
    launch()
    finish()
    ((kind, args, kwargs),) = fake_peers
    assert kind == "state" and kwargs == {"states_in_fp32": True}
    assert [a.values for a in args] == [tensors[n] for n in ("b", "x", "dt", "dA_cumsum")]
    inputs32 = {n: _dtypes.to_float32(np, t, dtypes[n]) for n, t in tensors.items()}
    want = chunk_state_reference(np, inputs32["b"], inputs32["x"], inputs32["dt"],
                                 inputs32["dA_cumsum"])
    assert tensors["states"].dtype == np.float32
    np.testing.assert_allclose(tensors["states"], want, rtol=1e-6)


def test_chunk_state_peer_writes_16_bit_states_when_the_spec_asks(
    fake_peers: list[tuple[str, tuple, dict]],
) -> None:
    op, params = "mamba2_chunk_state", {**PARAMS, "states_in_fp32": False}
    tensors, dtypes = _workload(op, params)
    assert dtypes["states"] == "bfloat16"
    launch, finish = prepare_baseline(PEERS[op], op, params, tensors, dtypes)
    launch()
    finish()
    ((kind, _, kwargs),) = fake_peers
    assert kind == "state" and kwargs == {"states_in_fp32": False}
    inputs32 = {n: _dtypes.to_float32(np, t, dtypes[n]) for n, t in tensors.items()}
    want = chunk_state_reference(np, inputs32["b"], inputs32["x"], inputs32["dt"],
                                 inputs32["dA_cumsum"])
    got = _dtypes.to_float32(np, tensors["states"], "bfloat16")
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2


def test_chunk_scan_peer_passes_d_and_writes_out_in_the_spec_dtype(
    fake_peers: list[tuple[str, tuple, dict]],
) -> None:
    op = "mamba2_chunk_scan"
    tensors, dtypes = _workload(op, PARAMS)
    assert dtypes["states"] == dtypes["out"] == "bfloat16" and dtypes["D"] == "float32"
    launch, finish = prepare_baseline(PEERS[op], op, PARAMS, tensors, dtypes)
    launch()
    finish()
    ((kind, args, kwargs),) = fake_peers
    assert kind == "scan" and kwargs["z"] is None and kwargs["D"].values is tensors["D"]
    names = ("cb", "x", "dt", "dA_cumsum", "c", "states")
    assert [a.values is tensors[n] for a, n in zip(args, names, strict=True)] == [True] * 6
    assert [a.dtype for a in args] == [dtypes[n] for n in names]  # bf16 viewed as bf16
    inputs32 = {n: _dtypes.to_float32(np, t, dtypes[n]) for n, t in tensors.items()}
    want = chunk_scan(np, *(inputs32[n] for n in names), inputs32["D"])
    got = _dtypes.to_float32(np, tensors["out"], "bfloat16")
    np.testing.assert_allclose(got, want, rtol=2**-7, atol=1e-6)


def test_triton_autotuning_is_redone_for_each_new_shape(
    fake_peers: list[tuple[str, tuple, dict]],
) -> None:
    op = "mamba2_chunk_scan"
    kernel = sys.modules["mamba_ssm.ops.triton.ssd_chunk_scan"]._chunk_scan_fwd_kernel
    tensors, dtypes = _workload(op, PARAMS)
    prepare_baseline(PEERS[op], op, PARAMS, tensors, dtypes)
    kernel.cache[(16, 16, 16)] = "config tuned for PARAMS"
    prepare_baseline(PEERS[op], op, PARAMS, tensors, dtypes)  # same shape: kept
    assert kernel.cache == {(16, 16, 16): "config tuned for PARAMS"}
    longer = {**PARAMS, "seqlen": 64}
    tensors, dtypes = _workload(op, longer)
    prepare_baseline(PEERS[op], op, longer, tensors, dtypes)  # same key, new shape: re-tuned
    assert kernel.cache == {}


def test_every_operator_declares_peers_the_worker_runs_for_it() -> None:
    from scheduler_search.ops import OPERATORS

    for op, spec_class in OPERATORS.items():
        assert spec_class.baseline is not None, op
        for name in (spec_class.baseline, *spec_class.peers):
            assert BASELINES[name].op == op, (op, name)


@pytest.mark.parametrize(("params", "why"), [
    ({"epilogue": {"act": "relu"}}, "no bias"),
    ({"epilogue": {"residual": True, "scale": 2.0}}, "no bias"),
    ({"epilogue": {"bias": True}, "dtype": "bfloat16", "out_dtype": "float16"},
     "written in another type"),
    ({"epilogue": {"bias": True}, "dtype": "float8_e4m3", "b_layout": "nk"}, "8-bit inputs"),
])
def test_the_cublaslt_peer_needs_a_bias_and_16_bit_inputs_in_their_type(
        params: dict[str, Any], why: str) -> None:
    params = {"m": 64, "n": 64, "k": 64, "dtype": "float16", **params}
    tensors, dtypes = _workload("gemm", params)
    with pytest.raises(BaselineUnavailable, match="needs a bias and 16-bit inputs"):
        prepare_baseline("cublaslt_epilogue", "gemm", params, tensors, dtypes)


class _Mat:
    """A torch tensor as the GEMM peers use it: fp32 values, over a workload array
    (``storage``) where it is a view of one."""

    def __init__(self, values: np.ndarray, storage: np.ndarray | None = None) -> None:
        self.values, self.storage = values.astype(np.float32), storage

    def t(self) -> _Mat:
        return _Mat(self.values.T)

    def __add__(self, other: _Mat) -> _Mat:
        return _Mat(self.values + other.values)

    def __mul__(self, scale: float) -> _Mat:
        return _Mat(self.values * np.float32(scale))

    def add_(self, other: _Mat) -> _Mat:
        _GemmTorch.calls.append(("add_", {}))
        self.values = self.values + other.values
        return self

    def copy_(self, other: _Mat) -> None:
        assert self.storage is not None
        np.copyto(self.storage, other.values.astype(self.storage.dtype))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


class _GemmTorch(types.ModuleType):
    """PyTorch's GEMM calls over NumPy, each recorded with its keyword arguments."""

    calls: ClassVar[list[tuple[str, dict[str, Any]]]] = []

    def __init__(self) -> None:
        super().__init__("torch")

    @staticmethod
    def from_dlpack(array: np.ndarray) -> _Mat:
        assert array.dtype == np.float16  # the fp16 workloads of these tests
        return _Mat(array, storage=array)

    @classmethod
    def matmul(cls, a: _Mat, b: _Mat) -> _Mat:
        cls.calls.append(("matmul", {}))
        return _Mat(a.values @ b.values)

    @classmethod
    def addmm(cls, bias: _Mat, a: _Mat, b: _Mat, *, alpha: float = 1.0) -> _Mat:
        cls.calls.append(("addmm", {"alpha": alpha}))
        return _Mat(np.float32(alpha) * (a.values @ b.values) + bias.values)

    @classmethod
    def _addmm_activation(cls, bias: _Mat, a: _Mat, b: _Mat, *, alpha: float = 1.0,
                          use_gelu: bool = False) -> _Mat:
        cls.calls.append(("_addmm_activation", {"alpha": alpha, "use_gelu": use_gelu}))
        y = np.float32(alpha) * (a.values @ b.values) + bias.values
        return _Mat(_gelu_tanh(y) if use_gelu else np.maximum(y, 0.0))


def _functional() -> types.ModuleType:
    from workers.verify import _erf

    def recorded(name: str, fn: Any) -> Any:
        def call(y: _Mat, approximate: str = "none") -> _Mat:
            _GemmTorch.calls.append((name, {"approximate": approximate}))
            return _Mat(fn(y.values, approximate))
        return call

    functional = types.ModuleType("torch.nn.functional")
    functional.relu = recorded("relu", lambda x, _: np.maximum(x, 0.0))
    functional.silu = recorded("silu", lambda x, _: x / (1.0 + np.exp(-x)))
    functional.gelu = recorded("gelu", lambda x, approximate: _gelu_tanh(x) if approximate
                               == "tanh" else 0.5 * x * (1.0 + _erf(np, x / np.sqrt(2.0))))
    return functional


@pytest.fixture
def gemm_torch(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    torch = _GemmTorch()
    torch.nn = types.ModuleType("torch.nn")
    torch.nn.functional = _functional()
    for name, module in (("torch", torch), ("torch.nn", torch.nn),
                         ("torch.nn.functional", torch.nn.functional)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(_GemmTorch, "calls", [])
    return _GemmTorch.calls


#: Epilogue -> the calls of one cublaslt_epilogue launch: the whole epilogue in one
#: cuBLASLt call where it fuses it; its bias (and activation) fused, the rest after, else.
CUBLASLT_CALLS = [
    ({"bias": True, "act": "gelu_tanh"},
     [("_addmm_activation", {"alpha": 1.0, "use_gelu": True})]),
    ({"bias": True, "act": "relu", "scale": 0.5},
     [("_addmm_activation", {"alpha": 0.5, "use_gelu": False})]),
    ({"bias": True}, [("addmm", {"alpha": 1.0})]),
    ({"bias": True, "residual": True}, [("addmm", {"alpha": 1.0}), ("add_", {})]),
    ({"bias": True, "act": "gelu", "residual": True},
     [("addmm", {"alpha": 1.0}), ("gelu", {"approximate": "none"}), ("add_", {})]),
    ({"bias": True, "act": "gelu_tanh", "residual": True, "scale": 2.0},
     [("_addmm_activation", {"alpha": 2.0, "use_gelu": True}), ("add_", {})]),
]


@pytest.mark.parametrize("b_layout", ["kn", "nk"])
@pytest.mark.parametrize(("epilogue", "calls"), CUBLASLT_CALLS,
                         ids=[str(sorted(e.items())) for e, _ in CUBLASLT_CALLS])
def test_the_cublaslt_peer_fuses_what_cublaslt_can_and_computes_the_epilogue(
        gemm_torch: list[tuple[str, dict[str, Any]]], b_layout: str, epilogue: dict[str, Any],
        calls: list[tuple[str, dict[str, Any]]]) -> None:
    from scheduler_search.ops.gemm import GemmEpilogue, cublaslt_fuses
    from workers.verify import reference

    params = {"m": 40, "n": 24, "k": 32, "dtype": "float16", "b_layout": b_layout,
              "epilogue": epilogue}
    tensors, dtypes = _workload("gemm", params)
    launch, finish = prepare_baseline("cublaslt_epilogue", "gemm", params, tensors, dtypes)
    gemm_torch.clear()  # prepare ran it once to see that it runs
    launch()
    finish()
    assert gemm_torch == calls
    assert cublaslt_fuses(GemmEpilogue(**epilogue)) == (len(calls) == 1)
    inputs32 = {n: t.astype(np.float32) for n, t in tensors.items() if n != "c"}
    want = reference(np, "gemm", params, inputs32)["c"]
    got = tensors["c"].astype(np.float32)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 2e-3


def test_the_unfused_peer_runs_one_op_per_step(
        gemm_torch: list[tuple[str, dict[str, Any]]]) -> None:
    from workers.verify import reference

    epilogue = {"bias": True, "act": "gelu_tanh", "residual": True, "scale": 2.0}
    params = {"m": 40, "n": 24, "k": 32, "dtype": "float16", "epilogue": epilogue}
    tensors, dtypes = _workload("gemm", params)
    launch, finish = prepare_baseline("torch_epilogue", "gemm", params, tensors, dtypes)
    launch()
    finish()
    assert [name for name, _ in gemm_torch] == ["matmul", "gelu"]  # * scale, + bias: operators
    inputs32 = {n: t.astype(np.float32) for n, t in tensors.items() if n != "c"}
    want = reference(np, "gemm", params, inputs32)["c"]
    got = tensors["c"].astype(np.float32)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 2e-3


def test_an_operator_registers_its_own_peer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Peers are a registry: a new operator's peer is prepared by name, and asked for
    another operator it is refused as any peer is."""
    from workers import baselines

    monkeypatch.setattr(baselines, "BASELINES", dict(baselines.BASELINES))
    calls: list[str] = []
    baselines.register_baseline(
        "toy_peer", "toy_scale",
        lambda params, tensors, dtypes: (lambda: calls.append("launch"),
                                         lambda: calls.append("finish")))
    launch, finish = prepare_baseline("toy_peer", "toy_scale", {}, {}, {})
    launch(), finish()
    assert calls == ["launch", "finish"]
    with pytest.raises(BaselineUnavailable, match="toy_peer"):
        prepare_baseline("toy_peer", "gemm", {}, {}, {})


ATTENTION = {"batch": 2, "heads": 4, "kv_heads": 2, "seq_q": 24, "seq_kv": 24, "head_dim": 16,
             "causal": True, "dtype": "bfloat16"}


def _fake_flash_attn_4(calls: list[dict[str, Any]]) -> dict[str, types.ModuleType]:
    """flash_attn.cute's entry point with its signature: (batch, seq, heads, head_dim)
    tensors in, (out, lse) back, computing our fp32 reference."""

    def flash_attn_func(q: _Tensor, k: _Tensor, v: _Tensor, causal: bool = False,
                        **options: Any) -> tuple[_Tensor, None]:
        calls.append({"shapes": [t.values.shape for t in (q, k, v)], "causal": causal,
                      "views": [t.values.base is not None for t in (q, k, v)]})
        out, _ = attention_reference(np, q.float32(), k.float32(), v.float32(), causal)
        return _Tensor(_dtypes.from_float32(np, out, q.dtype), q.dtype), None

    package, cute = types.ModuleType("flash_attn"), types.ModuleType("flash_attn.cute")
    cute.flash_attn_func = flash_attn_func
    return {"flash_attn": package, "flash_attn.cute": cute}


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_flash_attn_4_peer_runs_on_views_in_its_layout_and_writes_o(
        layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """FlashAttention-4 takes (batch, seq, heads, head_dim): a bhsd workload's tensors are
    handed over as transposed views (nothing copied) and its output comes back into o in
    the workload's layout, equal to the fp32 reference within bf16's rounding."""
    calls: list[dict[str, Any]] = []
    for name, module in _fake_flash_attn_4(calls).items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setitem(sys.modules, "torch", _Torch())
    params = {**ATTENTION, "layout": layout}
    tensors, dtypes = _workload("attention", params)
    launch, finish = prepare_baseline("flash_attn_4", "attention", params, tensors, dtypes)
    launch()
    finish()
    assert len(calls) == 2 and calls[0]["causal"] is True  # the check run, then ours
    assert calls[0]["shapes"][0] == (2, 24, 4, 16) and calls[0]["shapes"][1] == (2, 24, 2, 16)
    assert all(calls[0]["views"]) is (layout == "bhsd")
    got = _dtypes.to_float32(np, tensors["o"], "bfloat16")
    inputs = {n: _dtypes.to_float32(np, tensors[n], "bfloat16") for n in "qkv"}
    if layout == "bhsd":
        inputs = {n: x.transpose(0, 2, 1, 3) for n, x in inputs.items()}
    want, _ = attention_reference(np, inputs["q"], inputs["k"], inputs["v"], True)
    if layout == "bhsd":
        want = want.transpose(0, 2, 1, 3)
    assert np.abs(got - want).max() < 2e-2


def test_flash_attn_4_peer_says_why_it_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unavailable without the package, and for a causal case whose query and key lengths
    differ (its mask is bottom-right aligned, the spec's top-left)."""
    monkeypatch.setitem(sys.modules, "torch", _Torch())
    monkeypatch.setitem(sys.modules, "flash_attn.cute", None)
    tensors, dtypes = _workload("attention", ATTENTION)
    with pytest.raises(BaselineUnavailable, match=r"flash_attn\.cute does not import"):
        prepare_baseline("flash_attn_4", "attention", ATTENTION, tensors, dtypes)
    for name, module in _fake_flash_attn_4([]).items():
        monkeypatch.setitem(sys.modules, name, module)
    shorter = {**ATTENTION, "seq_q": 8}
    tensors, dtypes = _workload("attention", shorter)
    with pytest.raises(BaselineUnavailable, match="bottom-right aligned"):
        prepare_baseline("flash_attn_4", "attention", shorter, tensors, dtypes)


#: A stand-in CUTLASS library: configuration 1 refuses every shape, configuration 2 is
#: the fastest (it sleeps least); each call is logged.
FAKE_CUTLASS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
const char* pipetune_cutlass_sm80_configs = "slow;refuses;fast";
static FILE* log_file;
int pipetune_cutlass_sm80_gemm(int config, int bf16, int b_nk, int m, int n, int k,
                               const void* a, const void* b, void* c, void* stream) {
  if (!log_file) log_file = fopen(getenv("FAKE_CUTLASS_LOG"), "w");
  fprintf(log_file, "%d %d %d %d %d %d %p\n", config, bf16, b_nk, m, n, k, c);
  fflush(log_file);
  if (config == 1) return 1;
  usleep(config == 0 ? 2000 : 100);
  return 0;
}
"""


class _FakeEvent:
    def record(self) -> None:
        import time

        self.at = time.perf_counter()

    def synchronize(self) -> None:
        return None


def _fake_cupy() -> types.ModuleType:
    cuda = types.SimpleNamespace(
        Event=_FakeEvent, get_current_stream=lambda: types.SimpleNamespace(ptr=0),
        get_elapsed_time=lambda start, end: (end.at - start.at) * 1e3)
    return types.SimpleNamespace(cuda=cuda)  # type: ignore[return-value]


def test_the_cutlass_peer_needs_its_library_and_16_bit_gemms(
        monkeypatch: pytest.MonkeyPatch) -> None:
    params = {"m": 64, "n": 64, "k": 64, "dtype": "float16"}
    monkeypatch.delenv("PIPETUNE_CUTLASS_SM80_LIB", raising=False)
    with pytest.raises(BaselineUnavailable, match="PIPETUNE_CUTLASS_SM80_LIB"):
        prepare_baseline("cutlass_sm80", "gemm", params, {}, {"a": "float16"})


def test_the_cutlass_peer_launches_its_fastest_configuration_into_c(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    import subprocess

    source = tmp_path / "fake.c"
    source.write_text(FAKE_CUTLASS)
    library = tmp_path / "libfake.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    log = tmp_path / "calls.txt"
    monkeypatch.setenv("PIPETUNE_CUTLASS_SM80_LIB", str(library))
    monkeypatch.setenv("FAKE_CUTLASS_LOG", str(log))
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())
    tensors = {name: types.SimpleNamespace(data=types.SimpleNamespace(ptr=address))
               for name, address in (("a", 0x1000), ("b", 0x2000), ("c", 0x3000))}
    params = {"m": 128, "n": 256, "k": 512, "dtype": "bfloat16", "b_layout": "nk"}
    launch, finish = prepare_baseline("cutlass_sm80", "gemm", params, tensors,
                                      {"a": "bfloat16", "b": "bfloat16", "c": "bfloat16"})
    tried = log.read_text().splitlines()
    launch(), finish()
    calls = log.read_text().splitlines()
    assert {line.split()[0] for line in tried} == {"0", "1", "2"}
    assert calls[len(tried)].split() == ["2", "1", "1", "128", "256", "512", "0x3000"]
