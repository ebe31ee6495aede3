"""GEMMs with a fused epilogue on the CPU: the epilogue sTask sits between the product and
the store in the sProgram, the store applies it pair by pair on both sEUs, the launch
contract passes bias and residual as pointers, sampled schedules compile with nvcc for
sm_90a without spills, and schedules whose accumulators leave no registers for it are
out of the space with the reason."""

from __future__ import annotations

import pytest
from kernel_checks import assert_compile_clean
from schedule_samples import sample_schedules

from codegen import feasibility, render
from codegen.nvcc import nvcc_path
from scheduler_search.hardware import get_device
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.space import ScheduleSpace
from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED

DEVICE = get_device("h200")
FULL = {"bias": True, "act": "gelu", "residual": True, "scale": 0.5}


def _build(spec: GemmSpec, **choices: object) -> tuple:
    space = ScheduleSpace(spec, DEVICE, feasibility("gemm", DEVICE))
    merged = {**GEMM_WARP_SPECIALIZED, **choices}
    return space.build({k: v for k, v in merged.items() if v is not None})


def _consumer_stream(sprogram: object) -> list:
    return sprogram.role_stream("consumer0")  # type: ignore[attr-defined]


@pytest.mark.parametrize("store", ["tma", "cuda_core"])
def test_the_store_applies_the_epilogue_to_each_pair(store: str) -> None:
    spec = GemmSpec(m=4000, n=6000, k=2000, epilogue=FULL)
    sprogram, validity = _build(spec, map_store=store)
    assert validity.ok, validity
    stream = [(op.stask, unit.value) for unit, op in _consumer_stream(sprogram)]
    assert stream[-2:] == [("epilogue", "cuda_core"), ("store", store)]
    art = render(sprogram, spec, DEVICE)
    inputs = [(a.name, a.dtype, a.shape) for a in art.args if a.kind == "tensor"
              and a.role == "input"]
    assert inputs == [("bias", "float16", (6000,)), ("residual", "float16", (4000, 6000))]
    body = art.source.split("__global__")[1]
    assert "act_gelu(v0)" in body and "v0 *= 0.5f" in body
    assert "min(" in body and "M - 1" in body  # rows past M read the last row
    assert "< N ? unpack_f16x2" in body  # 6000 is a multiple of no tile width: columns guarded
    assert "erff" in art.source


def test_activations_run_on_the_sfu_without_ieee_division() -> None:
    """tanh GELU is one tanh.approx (CUDA's tanhf compiled to MUFU.EX2, MUFU.RCP and about
    20 more instructions an element, 2026-12-04), SiLU an approximate division."""
    spec = GemmSpec(m=4096, n=4096, k=4096, dtype="bfloat16", b_layout="nk",
                    epilogue={"bias": True, "act": "gelu_tanh"})
    sprogram, validity = _build(spec)
    assert validity.ok, validity
    source = render(sprogram, spec, DEVICE).source
    assert 'asm("tanh.approx.f32 %0, %1;"' in source and "tanhf" not in source
    assert source.index("float tanh_approx(") < source.index("float act_gelu_tanh(")
    silu = GemmSpec(m=4096, n=4096, k=4096, epilogue={"bias": True, "act": "silu"})
    sprogram, _ = _build(silu)
    assert "__fdividef(x, 1.0f + __expf(-x))" in render(sprogram, silu, DEVICE).source


def test_a_plain_gemm_has_no_epilogue_and_keeps_its_key() -> None:
    plain = GemmSpec(m=4096, n=4096, k=4096)
    assert "epilogue" not in plain.params()
    assert GemmSpec(m=4096, n=4096, k=4096, epilogue={}).workload_key() == plain.workload_key()
    sprogram, _ = _build(plain)
    assert "epilogue" not in {op.stask for _, op in _consumer_stream(sprogram)}
    source = render(sprogram, plain, DEVICE).source
    assert "act_" not in source and "bias" not in source


def test_an_odd_n_reads_bias_and_residual_element_by_element() -> None:
    spec = GemmSpec(m=513, n=1001, k=776, b_layout="nk",
                    epilogue={"bias": True, "residual": True})
    sprogram, validity = _build(spec, map_store="cuda_core")
    assert validity.ok, validity
    body = render(sprogram, spec, DEVICE).source.split("__global__")[1]
    assert "reinterpret_cast<const u32*>(bias" not in body  # pairs are not aligned
    assert "+ 1 < N) v1 +=" in body


def test_tiles_that_leave_no_registers_for_the_epilogue_are_out_of_the_space() -> None:
    spec = GemmSpec(m=4096, n=4096, k=4096, epilogue=FULL)
    one_consumer = {"consumer_warpgroups": 1, "consumer_split": None, "tile_m": 128,
                    "tile_n": 192, "producer_regs": 24}
    _, validity = _build(spec, **one_consumer)
    assert not validity.ok
    assert "registers per consumer thread" in validity.rejections[0].detail
    _, plain = _build(GemmSpec(m=4096, n=4096, k=4096), **one_consumer)
    assert plain.ok, plain


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_sampled_epilogue_schedules_compile_without_spills() -> None:
    sources = []
    for params in ({"m": 4096, "n": 4096, "k": 4096, "epilogue": FULL},
                   {"m": 777, "n": 1000, "k": 520, "dtype": "bfloat16",
                    "epilogue": {"bias": True, "act": "silu"}},
                   {"m": 513, "n": 1001, "k": 776, "b_layout": "nk",
                    "epilogue": {"act": "gelu_tanh", "residual": True}},
                   {"m": 4096, "n": 4096, "k": 4096, "dtype": "bfloat16", "b_layout": "nk",
                    "epilogue": {"bias": True, "act": "gelu_tanh"}}):
        spec = GemmSpec(**params)
        sources += [render(sp, spec, DEVICE).source
                    for sp in sample_schedules(spec, DEVICE, 4, seed=2026)]
    assert_compile_clean(sources)
