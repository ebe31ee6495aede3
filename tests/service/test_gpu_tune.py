"""``pipetune tune`` on a real GPU, end to end, from an empty database: the run measures
generated kernels and cuBLAS on the local GPU, stores the winner's kernel, prints its
latency and its speed against cuBLAS; the kernel it wrote runs through ``workers.load``
and matches ``torch.matmul``.

Run on an H200 with ``pytest tests/service/test_gpu_tune.py -m gpu``.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.gpu


def test_tune_a_small_gemm_on_the_gpu_and_run_its_kernel(
    tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    from codegen import KernelArtifact
    from service.cli import main
    from service.schemas import TIMING_METHOD_TEXT
    from workers import load

    monkeypatch.setenv("PIPETUNE_DATA_DIR", str(tmp_path / "data"))  # empty cubin cache
    database = f"sqlite:///{tmp_path / 'pipetune.db'}"
    kernel_file = tmp_path / "kernel.json"
    argv = ["tune", "gemm", "--m", "1024", "--n", "2048", "--k", "1024", "--dtype", "float16",
            "--trials", "24", "--database-url", database, "--kernel-out", str(kernel_file)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "on cuda:0 (run 1, 24 measured in" in out
    assert "kernel: " in out

    assert main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    # The speed against cuBLAS, said with how the GPU timed both (the workload's method).
    timed = TIMING_METHOD_TEXT[result["timing_method"]]
    assert f"vs cublas ({timed}): " in out
    assert result["cached"] is True and result["simulated"] is False
    assert result["device"] == "cuda:0" and result["baseline"] == "cublas"
    assert result["latency_us"] > 0 and result["baseline_latency_us"] > 0
    assert result["speedup_vs_baseline"] == pytest.approx(
        result["baseline_latency_us"] / result["latency_us"]
    )

    artifact = KernelArtifact.from_json(kernel_file.read_text())
    assert artifact.hash == result["kernel_hash"]
    gemm = load(artifact)
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    b = torch.randn(1024, 2048, device="cuda", dtype=torch.float16)
    c = gemm(a, b)
    ref = (a.float() @ b.float())
    torch.cuda.synchronize()
    error = float(torch.linalg.vector_norm(c.float() - ref) / torch.linalg.vector_norm(ref))
    assert error <= 1e-2


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_tune_attention_on_the_gpu_serve_its_kernel_and_run_it_on_torch_tensors(
    tmp_path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    """POST /v1/tune on the GPU, the kernel from GET /v1/kernels/{hash}, then the kernel
    on torch tensors in the spec's layout: PyTorch SDPA's (bhsd) or FlashAttention's (bshd),
    against SDPA; both peers are stored with the run."""
    import time

    import torch
    from fastapi.testclient import TestClient

    from service.core.config import Settings
    from service.main import create_app
    from workers import load

    monkeypatch.setenv("PIPETUNE_DATA_DIR", str(tmp_path / "data"))
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'pipetune.db'}",
                        data_dir=tmp_path / "data")
    params = {"batch": 2, "heads": 16, "kv_heads": 4, "seq_q": 1000, "seq_kv": 1000,
              "head_dim": 128, "causal": True, "dtype": "bfloat16", "layout": layout}
    with TestClient(create_app(settings)) as client:
        created = client.post("/v1/tune", json={"op": "attention", "params": params,
                                                "budget": {"trials": 16}})
        assert created.status_code == 202, created.text
        run_id = created.json()["run"]["id"]
        for _ in range(600):
            run = client.get(f"/v1/runs/{run_id}").json()
            if run["status"] in ("succeeded", "failed", "cancelled", "interrupted"):
                break
            time.sleep(0.5)
        assert run["status"] == "succeeded", run
        assert run["device"] == "cuda:0" and run["baseline"] == "sdpa_cudnn"
        assert set(run["peers"]) == {"sdpa_flash"} and run["speedup_vs_baseline"] > 0
        artifact = client.get(f"/v1/kernels/{run['best']['kernel_hash']}").json()

    attention = load(artifact)
    shape = {"bhsd": lambda s, h: (2, h, s, 128), "bshd": lambda s, h: (2, s, h, 128)}[layout]
    q = torch.randn(shape(1000, 16), device="cuda", dtype=torch.bfloat16)
    k = torch.randn(shape(1000, 4), device="cuda", dtype=torch.bfloat16)
    v = torch.randn(shape(1000, 4), device="cuda", dtype=torch.bfloat16)
    o, lse = attention(q, k, v)
    as_sdpa = (lambda x: x) if layout == "bhsd" else (lambda x: x.transpose(1, 2))
    qs, ks, vs = (as_sdpa(x).float() for x in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True,
                                                           enable_gqa=True)
    scores = (qs @ ks.repeat_interleave(4, dim=1).transpose(-1, -2)) / 128 ** 0.5
    scores = scores.masked_fill(torch.ones(1000, 1000, device="cuda").triu(1).bool(),
                                float("-inf"))
    ref_lse = torch.logsumexp(scores, dim=-1)
    torch.cuda.synchronize()
    o_sdpa = as_sdpa(o).float()
    assert float((o_sdpa - ref).norm() / ref.norm()) <= 2e-2
    assert float((lse - ref_lse).norm() / ref_lse.norm()) <= 1e-3
