"""``pipetune.torch.gemm`` on a real GPU: an untuned workload falls back to torch.matmul
and, with tuning enabled, is tuned in the background; the next call runs the tuned kernel,
equal to torch within the fp16 bound.

Run on an H200 with ``pytest tests/workers/test_dropins_gpu.py -m gpu``.
"""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.gpu


def test_a_miss_is_tuned_then_runs_the_tuned_kernel(tmp_path) -> None:
    import torch

    import pipetune.torch as pt

    drop = pt.DropIns(database_url=f"sqlite:///{tmp_path / 'cache.db'}", tune_on_miss=True,
                      budget={"trials": 8})
    a = torch.randn(1024, 512, device="cuda", dtype=torch.float16)
    b = torch.randn(512, 768, device="cuda", dtype=torch.float16)
    ref = a.float() @ b.float()
    first = drop.gemm(a, b)  # a miss: torch.matmul, and a tune starts
    assert drop.kernel("gemm", {"m": 1024, "n": 768, "k": 512, "dtype": "float16",
                                "b_layout": "kn"}, a) is None
    deadline = time.monotonic() + 300
    while drop._tuning:
        assert time.monotonic() < deadline, "the background tune did not finish"
        time.sleep(0.5)
    tuned = drop.gemm(a, b)
    assert drop.kernel("gemm", {"m": 1024, "n": 768, "k": 512, "dtype": "float16",
                                "b_layout": "kn"}, a) is not None
    torch.cuda.synchronize()
    for out in (first, tuned):
        assert float((out.float() - ref).norm() / ref.norm()) <= 1e-2
