"""Generated attention backward kernels on a real GPU: dq, dk and dv against the workers'
fp32 reference (poisoned outputs, seeded random inputs; o and lse from the forward),
over causal and full masks, GQA and MHA, head_dim 64 and 128, fp16 and bf16, both
layouts, lengths that are not a multiple of the tiles and query lengths other than the
keys'; each kernel launched twice in the workers' timing, so a dq workspace not left at
zeros by the first launch fails the second's check.

Run on an H200 with ``pytest tests/codegen -m gpu``; skipped where CuPy sees no GPU.
"""

from __future__ import annotations

import pytest
from gpu import cuda_device_visible
from kernel_checks import check_kernels
from schedule_samples import sample_schedules

from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_spec
from scheduler_search.ops.attention_backward import GRADIENT_REL_ERROR_BOUND

pytestmark = pytest.mark.gpu

DEVICE = get_device("h200")
SAMPLES_PER_CASE = 3
#: (batch, heads, kv_heads, seq_q, seq_kv, head_dim, layout, causal, dtype)
SHAPES = (
    (1, 8, 2, 512, 512, 128, "bshd", True, "bfloat16"),
    (2, 4, 4, 1024, 1024, 64, "bshd", False, "float16"),
    (1, 8, 2, 1000, 1000, 128, "bhsd", True, "float16"),
    (2, 4, 1, 300, 700, 64, "bhsd", False, "bfloat16"),
    (1, 4, 4, 700, 300, 128, "bshd", True, "bfloat16"),
    (1, 8, 8, 256, 256, 64, "bshd", True, "float16"),
)


def _cases() -> list[tuple[str, object, object]]:
    cases = []
    for b, h, kvh, sq, skv, d, layout, causal, dtype in SHAPES:
        spec = parse_spec("attention_backward", dict(
            batch=b, heads=h, kv_heads=kvh, seq_q=sq, seq_kv=skv, head_dim=d, layout=layout,
            causal=causal, dtype=dtype))
        name = f"{b}x{h}({kvh})x{sq}/{skv}xd{d}-{layout}-{'causal' if causal else 'full'}-{dtype}"
        cases += [(name, spec, sp) for sp in sample_schedules(spec, DEVICE, SAMPLES_PER_CASE,
                                                              seed=7)]
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    if not cuda_device_visible():
        pytest.skip("no CUDA device visible")
    return check_kernels(CASES, DEVICE, tmp_path_factory)  # type: ignore[arg-type]


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c[0] for c in CASES])
def test_gradients_match_the_reference(results: dict, index: int) -> None:
    name, _, sprogram = CASES[index]
    result = results[sprogram.hash]  # type: ignore[attr-defined]
    assert result.status.value == "ok", (name, sprogram.choices, result.error,  # type: ignore[attr-defined]
                                         result.log[-500:])
    assert result.rel_error is not None and result.rel_error < GRADIENT_REL_ERROR_BOUND
