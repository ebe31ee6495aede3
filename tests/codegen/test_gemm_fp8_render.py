"""GEMMs of 8-bit floats on the CPU: the spec (B stored n x k, per-tensor scales, bf16 out
by default), the kernel (k32 wgmma on K-major tiles of bytes, TMA maps of bytes, the scales
applied by the store with any epilogue), and sampled schedules compiled by nvcc for
sm_90a without spills."""

from __future__ import annotations

import pytest
from kernel_checks import assert_compile_clean
from pydantic import ValidationError
from schedule_samples import sample_schedules

from codegen import feasibility, render
from codegen.nvcc import nvcc_path
from scheduler_search.hardware import get_device
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.space import ScheduleSpace
from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED

DEVICE = get_device("h200")
FP8 = {"m": 4096, "n": 4096, "k": 4096, "dtype": "float8_e4m3", "b_layout": "nk"}


def test_an_fp8_spec_needs_b_n_by_k_and_has_scales() -> None:
    with pytest.raises(ValidationError) as raised:
        GemmSpec(**{**FP8, "b_layout": "kn"})
    assert raised.value.errors()[0]["loc"] == ("b_layout",)
    spec = GemmSpec(**FP8)
    tensors = {t.name: (t.dtype, t.shape, t.role) for t in spec.tensors()}
    assert tensors == {"a": ("float8_e4m3", (4096, 4096), "input"),
                       "b": ("float8_e4m3", (4096, 4096), "input"),
                       "scale_a": ("float32", (1,), "input"),
                       "scale_b": ("float32", (1,), "input"),
                       "c": ("bfloat16", (4096, 4096), "output")}
    assert "out_dtype" not in spec.params() and spec.run_baseline() == "scaled_mm"
    half = GemmSpec(**FP8, out_dtype="float16", epilogue={"bias": True})
    assert half.c_dtype == "float16" and half.params()["out_dtype"] == "float16"
    assert {t.name: t.dtype for t in half.tensors()}["bias"] == "float16"
    assert half.run_baseline() == "torch_epilogue"


@pytest.mark.parametrize("store", ["tma", "cuda_core"])
def test_the_fp8_kernel_reads_bytes_and_scales_its_product(store: str) -> None:
    spec = GemmSpec(**FP8)
    space = ScheduleSpace(spec, DEVICE, feasibility("gemm", DEVICE))
    sprogram, validity = space.build({**GEMM_WARP_SPECIALIZED, "map_store": store})
    assert validity.ok, validity
    art = render(sprogram, spec, DEVICE)
    maps = {a.name: a for a in art.args if a.kind == "tensor_map"}
    assert maps["a_map"].dtype == maps["b_map"].dtype == "float8_e4m3"
    assert maps["a_map"].global_strides_bytes == (4096,)  # one byte an element
    pointers = [(a.name, a.dtype) for a in art.args if a.kind == "tensor" and a.role == "input"]
    assert pointers == [("scale_a", "float32"), ("scale_b", "float32")]
    body = art.source.split("__global__")[1]
    assert "wgmma_m64n" in body and "k32_e4m3_bk" in body
    assert "scale_a[0] * scale_b[0]" in body
    assert (maps["c_map"].dtype if store == "tma" else
            next(a.dtype for a in art.args if a.name == "c")) == "bfloat16"


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_sampled_fp8_schedules_compile_without_spills() -> None:
    sources = []
    for params in (FP8, {**FP8, "dtype": "float8_e5m2", "m": 4000, "n": 6000, "k": 2000,
                         "out_dtype": "float16", "epilogue": {"bias": True, "act": "gelu"}}):
        spec = GemmSpec(**params)
        sources += [render(sp, spec, DEVICE).source
                    for sp in sample_schedules(spec, DEVICE, 4, seed=2026)]
    assert_compile_clean(sources)
