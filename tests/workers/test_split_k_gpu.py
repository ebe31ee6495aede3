"""Split-K GEMMs called as users call them (``workers.load`` on torch tensors): the same
bits on every call and close to the fp32 product.

Every shape of split-K's part of the kernel (:func:`split_k_check_designs`: each
fragment a consumer writes and the first block sums, swapped or not, both stores, one
tile a cluster or persistent clusters that sum tile after tile) at a shape of many
partial tiles in both B layouts, and the decode designs (:func:`split_k_designs`) at
decode shapes of few tiles; then the persistent ones with m at run time, at sizes whose
last m tile is partial. A cluster's sums are added in rank order, so the sum is the same
whatever block finished first.

Run on an H200 with ``pytest tests/workers/test_split_k_gpu.py -m gpu``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from range_checks import errors_by_size

from codegen import render, unsupported
from codegen.artifact import RangeArtifact, RangeBucket
from scheduler_search.hardware import get_device
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.space.designs import split_k_check_designs, split_k_designs
from scheduler_search.sprogram import check_valid, plan_sprogram
from workers import load

pytestmark = pytest.mark.gpu

DEVICE = get_device("h200")
CALLS = 20
BOUND = 1e-2
CASES = [((4000, 6000, 2000), layout, "check") for layout in ("nk", "kn")] + [
    ((m, 1280, 8192), "nk", "decode") for m in (1, 32, 128, 256)] + [
    ((128, 7168, 8192), "kn", "decode")]


def _operands(m: int, n: int, k: int, layout: str, seed: int = 5) -> tuple:
    import torch

    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    shape = (n, k) if layout == "nk" else (k, n)
    return a, torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=gen)


def _product(a, b, layout: str):
    return a.float() @ (b.float().t() if layout == "nk" else b.float())


def _check(kernel, a, b, layout: str) -> tuple[int, float]:
    """Calls whose output differs from the first call's in any bit, and the first call's
    relative error against the fp32 product."""
    import torch

    first = kernel(a, b).clone()
    differing = sum(not torch.equal(kernel(a, b), first) for _ in range(CALLS))
    reference = _product(a, b, layout)
    return differing, ((first.float() - reference).norm() / reference.norm()).item()


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{'x'.join(map(str, c[0]))}-{c[1]}")
def test_split_k_designs_give_the_same_bits_close_to_fp32(case: tuple) -> None:
    (m, n, k), layout, which = case
    spec = GemmSpec(m=m, n=n, k=k, dtype="bfloat16", b_layout=layout)
    designs = split_k_check_designs() if which == "check" else split_k_designs(m, n)
    a, b = _operands(m, n, k, layout)
    failures, checked = [], 0
    for choices in designs:
        sprogram = plan_sprogram(spec, DEVICE, choices)
        assert check_valid(sprogram, spec, DEVICE).ok and unsupported(sprogram, DEVICE) is None
        differing, error = _check(load(render(sprogram, spec, DEVICE)), a, b, layout)
        checked += 1
        if differing or not error <= BOUND:
            failures.append((choices, differing, error))
    assert checked == len(designs) and not failures, failures


@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_persistent_split_k_takes_m_at_run_time(layout: str) -> None:
    import torch

    n, k, high = 1280, 4096, 2048
    spec = GemmSpec(m=high, n=n, k=k, dtype="bfloat16", b_layout=layout)
    persistent = [d for d in split_k_check_designs() if d.get("persistent", True)]
    for choices in persistent:
        sprogram = replace(plan_sprogram(spec, DEVICE, choices), runtime_dims=("m",))
        artifact = RangeArtifact(
            op="gemm", params={"m": {"min": 1, "max": high}, "n": n, "k": k,
                               "dtype": "bfloat16", "b_layout": layout},
            dim="m", size_from=("a", 0),
            buckets=(RangeBucket(1, high, render(sprogram, spec, DEVICE)),))
        kernel = load(artifact.to_json())
        gen = torch.Generator(device="cuda").manual_seed(9)
        _, b = _operands(1, n, k, layout, seed=9)
        errors = errors_by_size(kernel, b, (1, 77, 128, 1000, high), k, gen,
                                lambda a, b: _product(a, b, layout))
        assert all(e <= BOUND for e in errors.values()), (choices, errors)
