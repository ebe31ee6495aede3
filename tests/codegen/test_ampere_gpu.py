"""Ampere-class kernels on a real GPU: the sm_80 and sm_89 code of every operator, run on
the lent Hopper GPU (which executes cp.async, mma.sync and ldmatrix) as ``cuda:0@sm_80``
does, checked by the workers against the fp32 reference with poisoned outputs on seeded
random inputs: GEMM on suite and odd shapes in both B layouts and both 16-bit types,
attention in both layouts (GQA, causal, head sizes 64 and 128, a length no tile divides),
Mamba2's chunk scan and chunk state, 8-bit GEMMs in sm_89 code; schedules with and without
a producer warpgroup.

Run with ``pytest tests/codegen -m gpu``; skipped where CuPy sees no GPU.
"""

from __future__ import annotations

import pytest
from gpu import cuda_device_visible
from kernel_checks import assert_correct, check_kernels
from schedule_samples import sample_schedules

from scheduler_search.hardware import get_device, running_code_of
from scheduler_search.ops import OperatorSpec, parse_spec
from scheduler_search.sprogram import SProgram

pytestmark = pytest.mark.gpu

#: The lent GPU running each Ampere-class architecture's code (planned with its limits).
DEVICES = {arch: running_code_of(get_device("h200"), arch) for arch in ("sm_80", "sm_89")}
_MAMBA2 = {"nheads": 8, "headdim": 64, "dstate": 128, "ngroups": 1, "chunk_size": 256,
           "dtype": "float16"}
_ATTENTION = {"batch": 2, "heads": 8, "kv_heads": 2, "seq_q": 1024, "seq_kv": 1024,
              "head_dim": 128, "causal": True, "dtype": "bfloat16"}
#: (operator, params, schedules drawn per architecture).
WORKLOADS: tuple[tuple[str, dict, int], ...] = (
    ("gemm", {"m": 1024, "n": 1024, "k": 1024, "dtype": "float16", "b_layout": "kn"}, 4),
    ("gemm", {"m": 1024, "n": 1024, "k": 1024, "dtype": "bfloat16", "b_layout": "nk"}, 4),
    ("gemm", {"m": 777, "n": 1000, "k": 520, "dtype": "float16", "b_layout": "kn"}, 3),
    ("gemm", {"m": 513, "n": 1001, "k": 776, "dtype": "bfloat16", "b_layout": "nk"}, 3),
    ("gemm", {"m": 16, "n": 4096, "k": 4096, "dtype": "bfloat16", "b_layout": "nk"}, 2),
    ("attention", _ATTENTION, 4),
    ("attention", {**_ATTENTION, "causal": False, "head_dim": 64, "kv_heads": 8,
                   "layout": "bhsd", "dtype": "float16"}, 3),
    ("attention", {**_ATTENTION, "seq_q": 1000, "seq_kv": 1000}, 3),
    ("mamba2_chunk_scan", {**_MAMBA2, "batch": 2, "seqlen": 1024}, 3),
    ("mamba2_chunk_state", {**_MAMBA2, "batch": 2, "seqlen": 1024}, 3),
)


#: 8-bit GEMMs where mma.sync multiplies them (sm_89 code; the Hopper GPU runs it too).
FP8_WORKLOADS: tuple[tuple[str, dict, int], ...] = (
    ("gemm", {"m": 1024, "n": 1024, "k": 1024, "dtype": "float8_e4m3", "b_layout": "nk"}, 3),
    ("gemm", {"m": 777, "n": 1000, "k": 528, "dtype": "float8_e5m2", "b_layout": "nk"}, 2),
)


def _cases(arch: str) -> list[tuple[str, OperatorSpec, SProgram]]:
    cases = []
    fp8 = FP8_WORKLOADS if DEVICES[arch].capabilities.fp8_mma else ()
    for op, params, count in WORKLOADS + fp8:
        spec = parse_spec(op, params)
        for sprogram in sample_schedules(spec, DEVICES[arch], count, seed=13):
            cases.append((f"{arch}-{op}-{sorted(params.items())}", spec, sprogram))
    return cases


CASES = {arch: _cases(arch) if cuda_device_visible() else [] for arch in DEVICES}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    return {arch: check_kernels(CASES[arch], DEVICES[arch], tmp_path_factory)
            for arch in DEVICES}


@pytest.mark.parametrize("arch", sorted(DEVICES))
def test_ampere_class_kernels_are_correct_on_the_gpu(arch: str, results: dict) -> None:
    wrong = []
    for name, _, sprogram in CASES[arch]:
        try:
            assert_correct(results[arch][sprogram.hash], name, sprogram)
        except AssertionError as error:
            wrong.append(str(error)[:300])
    assert not wrong, f"{len(wrong)} of {len(CASES[arch])}: {wrong[:4]}"


def test_both_loaders_are_checked() -> None:
    """A producer warpgroup's copies and the first consumer's copies ahead."""
    if not cuda_device_visible():
        pytest.skip("no GPU")
    specialised = {sp.roles.warp_specialized for arch in DEVICES for _, _, sp in CASES[arch]}
    assert specialised == {True, False}
