"""GEMM kernels that take m at run time: one source for every m of a range, a launch
contract rebound per size, the schedules that cannot take a size at run time named, and a
sample of them compiled with nvcc for sm_90a without spills."""

from __future__ import annotations

from dataclasses import replace

import pytest
from kernel_checks import assert_compile_clean
from runtime_samples import design_schedules, runtime_m, sampled_schedules

from codegen import KernelArtifact, ScalarArg, TensorArg, TensorMapArg, render, unsupported
from codegen.nvcc import nvcc_path
from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_spec
from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED
from scheduler_search.sprogram import plan_sprogram

DEVICE = get_device("h200")


def _spec(m: int, **params: object):
    return parse_spec("gemm", {"m": m, "n": 4096, "k": 4096, "dtype": "float16",
                               "b_layout": "nk", **params})


def _arg(artifact: KernelArtifact, name: str):
    return next(a for a in artifact.args if a.name == name)


def test_the_bound_contract_follows_the_size() -> None:
    spec = _spec(16384, epilogue={"bias": True, "residual": True})
    sprogram = runtime_m(plan_sprogram(spec, DEVICE, {**GEMM_WARP_SPECIALIZED,
                                                      "stream_k": 1, "tile_n": 128}))
    artifact = render(sprogram, spec, DEVICE)
    assert artifact.runtime_dims == ("m",)
    bound = artifact.at_sizes({"m": 17})
    assert (bound.source, bound.grid, bound.entry) == (artifact.source, artifact.grid,
                                                       artifact.entry)
    assert bound.params["m"] == 17 and bound.hash != artifact.hash
    size = _arg(bound, "M")
    assert isinstance(size, ScalarArg) and size.value == 17
    a_map, c_map = _arg(bound, "a_map"), _arg(bound, "c_map")
    assert isinstance(a_map, TensorMapArg) and a_map.global_dims == (4096, 17)
    assert isinstance(c_map, TensorMapArg) and c_map.global_dims == (4096, 17)
    residual = _arg(bound, "residual")
    assert isinstance(residual, TensorArg) and residual.shape == (17, 4096)
    assert _arg(bound, "bias") == _arg(artifact, "bias")  # (n,): not sized
    assert _arg(bound, "b_map") == _arg(artifact, "b_map")
    # The contract of the bound kernel is the exact spec's at that size.
    assert bound.args == render(replace(sprogram, params=_spec(17, epilogue={
        "bias": True, "residual": True}).params()), device=DEVICE).args
    with pytest.raises(ValueError, match="not"):
        artifact.at_sizes({"n": 4})


def test_one_source_serves_every_size_of_the_range() -> None:
    """The text does not depend on the m it is planned at (only the schedule's identity,
    which names the entry, does)."""
    texts = []
    for m in (16384, 300):
        sprogram = runtime_m(plan_sprogram(_spec(m), DEVICE, {**GEMM_WARP_SPECIALIZED,
                                                              "stream_k": 1}))
        texts.append(render(sprogram, device=DEVICE).source.replace(sprogram.hash, "H")
                     .replace(sprogram.hash[:16], "H"))
    assert texts[0] == texts[1]
    assert "constexpr int M =" not in texts[0] and "const int M)" in texts[0]


def test_a_specialised_kernel_keeps_its_text() -> None:
    """Without run-time sizes nothing changes: m is a constant, the contract unsized."""
    sprogram = plan_sprogram(_spec(4000), DEVICE, GEMM_WARP_SPECIALIZED)
    artifact = render(sprogram, device=DEVICE)
    assert "constexpr int M = 4000" in artifact.source
    assert artifact.size_slots == () and "size_slots" not in artifact.extra
    assert "runtime_dims" not in sprogram.to_dict()
    assert runtime_m(sprogram).hash != sprogram.hash


def test_schedules_that_cannot_take_a_size_at_run_time_are_named() -> None:
    spec = _spec(16384)
    one_wave = runtime_m(plan_sprogram(spec, DEVICE, {**GEMM_WARP_SPECIALIZED,
                                                      "persistent": False}))
    assert "persistent" in (unsupported(one_wave, DEVICE) or "")
    base = plan_sprogram(spec, DEVICE, GEMM_WARP_SPECIALIZED)
    shared = plan_sprogram(spec, DEVICE, {**GEMM_WARP_SPECIALIZED, "stream_k": 1,
                                          "cluster_size": 2, "cluster_axis": "m"})
    assert "stream-K over clusters" in (unsupported(runtime_m(shared), DEVICE) or "")
    by_n = replace(base, runtime_dims=("n",))
    assert "takes m at run time, not n" in (unsupported(by_n, DEVICE) or "")


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_runtime_m_kernels_compile_without_spills() -> None:
    sources = []
    for dtype, layout in (("float16", "nk"), ("bfloat16", "kn")):
        spec = _spec(16384, dtype=dtype, b_layout=layout)
        schedules = [*design_schedules(spec, DEVICE).values(),
                     *sampled_schedules(spec, DEVICE, 5, seed=20)]
        sources += [render(s, spec, DEVICE).source for s in schedules]
    assert len(set(sources)) >= 12
    assert_compile_clean(sources)


def test_a_cluster_along_m_counts_whole_clusters_at_run_time() -> None:
    """Blocks of a cluster along m share their weight slices by multicast: at a run-time
    m the tiles along m are counted in whole clusters (an odd count's last block takes
    the last rows again, clamped inside m, and stores what its partner stores), and
    no static count of m tiles is asserted."""
    spec = _spec(16384)
    sprogram = runtime_m(plan_sprogram(spec, DEVICE, {
        **GEMM_WARP_SPECIALIZED, "tile_n": 192, "stages_ab": 4, "stream_k": 0,
        "cluster_size": 2, "cluster_axis": "m"}))
    assert unsupported(sprogram, DEVICE) is None
    source = render(sprogram, device=DEVICE).source
    assert ("const int TILES_M = ((M + 127) / 128 + CLUSTER - 1) / CLUSTER * CLUSTER;"
            in source)
    assert "TILES_M % CLUSTER" not in source
    assert "max((M) - 128, 0)" in source  # the tile origin stays inside m
