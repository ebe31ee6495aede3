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
    from workers import load

    monkeypatch.setenv("PIPETUNE_DATA_DIR", str(tmp_path / "data"))  # empty cubin cache
    database = f"sqlite:///{tmp_path / 'pipetune.db'}"
    kernel_file = tmp_path / "kernel.json"
    argv = ["tune", "gemm", "--m", "1024", "--n", "2048", "--k", "1024", "--dtype", "float16",
            "--trials", "24", "--database-url", database, "--kernel-out", str(kernel_file)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "on cuda:0 (run 1, 24 measured in" in out
    assert "vs cublas: " in out and "kernel: " in out

    assert main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
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
