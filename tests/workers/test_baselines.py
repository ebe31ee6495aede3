"""The Mamba2 peers (mamba_ssm's Triton kernels) on a machine without them: unavailable
with a message saying what to install, and, over stand-in torch and mamba_ssm modules
computing the NumPy reference, the wiring of the workload's tensors into the peer's call and
of its result into the workload's output."""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest

from workers import _dtypes, baselines
from workers.baselines import BASELINE_OPS, BaselineUnavailable, prepare_baseline
from workers.contract import contract
from workers.inputs import build_inputs
from workers.verify import chunk_scan_reference, chunk_state_reference

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
        ref = chunk_scan_reference(np, cb.float32(), x.float32(), dt.float32(), da.float32(),
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
        assert BASELINE_OPS[name] == op
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
    want = chunk_scan_reference(np, *(inputs32[n] for n in names), inputs32["D"])
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
            assert BASELINE_OPS[name] == op, (op, name)


@pytest.mark.parametrize("epilogue", [{"bias": True, "act": "gelu"},
                                      {"bias": True, "residual": True},
                                      {"act": "relu"},
                                      {"bias": True, "act": "relu", "scale": 2.0}])
def test_cublaslt_fuses_only_a_bias_with_relu_or_tanh_gelu(epilogue: dict[str, Any]) -> None:
    params = {"m": 64, "n": 64, "k": 64, "dtype": "float16", "epilogue": epilogue}
    tensors, dtypes = _workload("gemm", params)
    with pytest.raises(BaselineUnavailable, match="fuses a bias with ReLU or tanh GELU only"):
        prepare_baseline("cublaslt_epilogue", "gemm", params, tensors, dtypes)
