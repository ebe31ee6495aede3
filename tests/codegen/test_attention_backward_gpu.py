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


#: Shapes whose dq is summed in key-tile order (spec field ``deterministic``).
DETERMINISTIC = (
    (2, 8, 2, 1024, 1024, 64, "bshd", True, "bfloat16"),
    (1, 4, 4, 700, 300, 128, "bhsd", False, "float16"),
)


def _spec(shape: tuple, deterministic: bool = False) -> object:
    b, h, kvh, sq, skv, d, layout, causal, dtype = shape
    return parse_spec("attention_backward", dict(
        batch=b, heads=h, kv_heads=kvh, seq_q=sq, seq_kv=skv, head_dim=d, layout=layout,
        causal=causal, dtype=dtype, deterministic=deterministic))


def _cases() -> list[tuple[str, object, object]]:
    cases = []
    for shape, deterministic in [(s, False) for s in SHAPES] + [(s, True) for s in DETERMINISTIC]:
        b, h, kvh, sq, skv, d, layout, causal, dtype = shape
        spec = _spec(shape, deterministic)
        name = (f"{b}x{h}({kvh})x{sq}/{skv}xd{d}-{layout}-{'causal' if causal else 'full'}-"
                f"{dtype}{'-deterministic' if deterministic else ''}")
        sampled = list(sample_schedules(spec, DEVICE, SAMPLES_PER_CASE, seed=7))
        cases += [(name, spec, sp) for sp in sampled]
        cases += [(f"{name}-interleave", spec, sp)
                  for sp in _twins(spec, sampled, {"order": "interleave", "tile_q": 64})]
        if not deterministic:
            cases += [(f"{name}-stagger", spec, sp)
                      for sp in _twins(spec, sampled, {"raster_stagger": True})]
    return cases


def _twins(spec: object, sampled: list, change: dict) -> list:
    """The sampled schedules with ``change`` (the ``interleave`` order at 64 queries a
    trip, where the registers allow it; each key tile's trips staggered), so that every
    run checks those choices too."""
    from codegen import unsupported
    from scheduler_search.sprogram import ScheduleError, plan_sprogram

    found = {}
    for sprogram in sampled:
        try:
            planned = plan_sprogram(spec, DEVICE, {**sprogram.choices, **change})
        except ScheduleError:
            continue
        if unsupported(planned, DEVICE) is None:
            found[planned.hash] = planned
    return list(found.values())


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


@pytest.mark.parametrize("shape", DETERMINISTIC)
def test_a_deterministic_dq_is_the_same_bits_every_run(shape: tuple) -> None:
    """Five launches on the same inputs: dq, dk and dv identical to the bit (fp32 atomics
    in a free order would differ in their last bits)."""
    if not cuda_device_visible():
        pytest.skip("no CUDA device visible")
    torch = pytest.importorskip("torch")
    from codegen import render
    from workers import load

    spec = _spec(shape, deterministic=True)
    inputs = _torch_inputs(torch, spec.params())
    for sprogram in sample_schedules(spec, DEVICE, 2, seed=3):
        kernel = load(render(sprogram, spec, DEVICE))
        runs = [[x.clone() for x in kernel(*inputs)] for _ in range(5)]
        for later in runs[1:]:
            for first, again in zip(runs[0], later, strict=True):
                assert torch.equal(first.view(torch.int16), again.view(torch.int16))


def _torch_inputs(torch: object, p: dict) -> tuple:
    """q, k, v, o, lse, dO: random, with lse the scores' true log-sum-exp (so every
    probability is at most 1) and o random (dq's bits need no true o)."""
    t = torch  # type: ignore[assignment]
    dtype = getattr(t, p["dtype"])
    generator = t.Generator(device="cuda").manual_seed(5)

    def draw(heads: int, seq: int) -> object:
        return t.randn((p["batch"], heads, seq, p["head_dim"]), generator=generator,
                       device="cuda").to(dtype)

    q, k, v = draw(p["heads"], p["seq_q"]), draw(p["kv_heads"], p["seq_kv"]), \
        draw(p["kv_heads"], p["seq_kv"])
    o, do = draw(p["heads"], p["seq_q"]), draw(p["heads"], p["seq_q"])
    group = p["heads"] // p["kv_heads"]
    scores = (q.float() @ k.float().repeat_interleave(group, 1).transpose(-1, -2)
              / p["head_dim"] ** 0.5)
    if p["causal"]:
        scores = scores.masked_fill(t.ones(scores.shape[-2:], device="cuda").triu(1).bool(),
                                    float("-inf"))
    lse = t.logsumexp(scores, -1).contiguous()
    if p["layout"] == "bshd":
        q, k, v, o, do = (x.transpose(1, 2).contiguous() for x in (q, k, v, o, do))
    return q, k, v, o, lse, do
