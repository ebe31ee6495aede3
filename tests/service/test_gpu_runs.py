"""The GPU path of the service on a pretend GPU (``gpu_fakes``): executor choice, a run
that measures generated kernels and the cuBLAS baseline, the stored kernel, the cost
model's calibration carried to the next run, an attention run timing both its peers
(cuDNN SDPA and FlashAttention-2), and ``pipetune tune`` printing it all."""

from __future__ import annotations

import io
import json
import time
import zipfile
from collections.abc import Iterator, Sequence

import pytest
from fastapi.testclient import TestClient
from gpu_fakes import (
    CUBLAS_US,
    FINGERPRINT,
    MAMBA_SSM_CHUNK_SCAN_US,
    SDPA_CUDNN_US,
    SDPA_FLASH_US,
    TRUE_TENSOR_SCALE,
    FakeProbe,
    ModelGpu,
)
from service_helpers import bench_module, wait_for

from codegen import KernelArtifact
from scheduler_search.cost_model import Calibration
from scheduler_search.ops import parse_spec
from scheduler_search.search.presets import timing_method
from service.core.config import Settings
from service.core.db import Database
from service.db import repositories as repo
from service.db import results as results_repo
from service.main import create_app
from service.runs import devices as devices_module
from service.runs.devices import DeviceError, resolve_device
from service.runs.executors import ExecutorRegistry
from service.runs.in_process import cached_figures
from service.schemas import TIMING_METHOD_TEXT, TuneRequest
from workers import Job, SimulatedDevice, fingerprint_key

GEMM = {"m": 2048, "n": 2048, "k": 2048, "dtype": "float16"}
OTHER_GEMM = {"m": 4096, "n": 2048, "k": 2048, "dtype": "float16"}
ATTENTION = {"batch": 1, "heads": 8, "kv_heads": 8, "seq_q": 512, "seq_kv": 512,
             "head_dim": 128, "causal": False, "dtype": "float16"}
CHUNK_SCAN = {"batch": 1, "seqlen": 1024, "nheads": 8, "headdim": 64, "dstate": 128,
              "ngroups": 1, "chunk_size": 256, "dtype": "float16"}


@pytest.fixture
def no_gpu() -> Iterator[None]:
    previous = devices_module.set_gpu_probe(FakeProbe(count=0))
    try:
        yield
    finally:
        devices_module.set_gpu_probe(previous)


def test_auto_is_the_simulated_h200_without_a_gpu(no_gpu: None) -> None:
    device = resolve_device("auto")
    assert device.name == "sim:h200" and device.simulated and device.kind == "simulated"
    with pytest.raises(DeviceError, match="0 CUDA device"):
        resolve_device("cuda:0")


def test_auto_is_the_local_gpu_keyed_by_its_fingerprint(fake_gpu: FakeProbe) -> None:
    device = resolve_device("auto")
    assert device.name == "cuda:0" and device.kind == "cuda" and not device.simulated
    assert device.key == fingerprint_key(FINGERPRINT)
    assert device.identity["fingerprint"] == FINGERPRINT
    assert device.model.sm_count == 132 and device.model.arch == "sm_90a"
    assert device.model.software["codegen_version"] == "gemm-1"
    assert resolve_device("cuda:0") == device
    with pytest.raises(DeviceError, match="1 CUDA device"):
        resolve_device("cuda:1")
    # A simulated H200 never shares the cache with the real one.
    assert resolve_device("sim:h200").key != device.key


def test_a_gpu_running_ampere_class_code_is_a_device_of_its_own(fake_gpu: FakeProbe) -> None:
    """``cuda:0@sm_80``: the same GPU, planned as sm_80 code (its SMs, the A100's shared
    memory per block), keyed apart from the native device and from each other arch."""
    native = resolve_device("cuda:0")
    ampere = resolve_device("cuda:0@sm_80")
    assert (ampere.name, ampere.kind, ampere.simulated) == ("cuda:0@sm_80", "cuda", False)
    assert ampere.model.arch == "sm_80" and ampere.model.sm_count == native.model.sm_count
    assert ampere.model.smem_per_block_bytes < native.model.smem_per_block_bytes
    assert ampere.identity["code_arch"] == "sm_80"
    assert len({native.key, ampere.key, resolve_device("cuda:0@sm_89").key}) == 3
    assert resolve_device("CUDA:0@SM_80".lower()) == ampere
    for name, says in (("cuda:0@sm_70", "no code generation for sm_70"),
                       ("cuda:1@sm_80", "1 CUDA device")):
        with pytest.raises(DeviceError, match=says):
            resolve_device(name)


def test_registry_gives_cuda_devices_a_gpu_pool(fake_gpu: FakeProbe) -> None:
    made = []

    def factory(device):
        made.append(device.name)
        return ModelGpu()

    registry = ExecutorRegistry(gpu_pool_factory=factory)
    gpu = registry.get(resolve_device("cuda:0"))
    assert isinstance(gpu, ModelGpu) and registry.get(resolve_device("auto")) is gpu
    assert isinstance(registry.get(resolve_device("sim:h200")), SimulatedDevice)
    assert made == ["cuda:0"]
    registry.close()
    assert gpu.closed


def test_a_slow_gpu_pool_start_holds_up_no_other_device(fake_gpu: FakeProbe) -> None:
    """While a GPU's pool starts (seconds), a simulated device's executor comes at once,
    and a second asker of the GPU gets the same pool, made once."""
    import threading

    release, made = threading.Event(), []

    def slow_factory(device):
        made.append(device.name)
        release.wait(10)
        return ModelGpu()

    registry = ExecutorRegistry(gpu_pool_factory=slow_factory)
    got: list[object] = []
    askers = [threading.Thread(target=lambda: got.append(registry.get(resolve_device("cuda:0"))))
              for _ in range(2)]
    for asker in askers:
        asker.start()
    deadline = time.monotonic() + 5
    while not made:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert isinstance(registry.get(resolve_device("sim:h200")), SimulatedDevice)
    assert got == []  # the GPU's pool is still starting
    release.set()
    for asker in askers:
        asker.join(10)
    assert len(got) == 2 and got[0] is got[1] and made == ["cuda:0"]
    registry.close()


@pytest.fixture
def gpu_settings(database_url: str, tmp_path) -> Settings:
    return Settings(
        database_url=database_url,
        data_dir=tmp_path,
        max_concurrent_runs=1,
        heartbeat_s=0.5,
        stale_after_s=5.0,
        cost_model_seeds=0,  # ranking the whole space in another process takes seconds
    )


class _Warmed(ModelGpu):
    """A pretend GPU that records when it was warmed."""

    def __init__(self) -> None:
        super().__init__(batch=4)
        self.warmed_at: float | None = None
        self.warm_jobs: list = []

    def warm(self, jobs: Sequence[Job] = ()) -> None:
        self.warm_jobs = list(jobs)
        self.warmed_at = time.monotonic()


@pytest.mark.parametrize("warm", [True, False])
def test_a_run_manager_warms_its_gpus_executor_before_any_run(
    fake_gpu: FakeProbe, gpu_settings: Settings, warm: bool
) -> None:
    """A warm serve: the GPU's pool starts when the service does (worker, CUDA, compile
    pool), so the first request finds it running; off, it starts at the first run."""
    made: list[_Warmed] = []

    def factory(device: object) -> _Warmed:
        made.append(_Warmed())
        return made[-1]

    settings = gpu_settings.model_copy(update={"warm_executors": warm})
    with TestClient(create_app(settings, gpu_pool_factory=factory)) as client:
        deadline = time.monotonic() + 10
        while warm and not (made and made[0].warmed_at):
            assert time.monotonic() < deadline, "the GPU's executor was not warmed"
            time.sleep(0.02)
        if warm:  # the warm-up: per 16-bit type, a generated GEMM kernel and the baseline
            warmed = made[0].warm_jobs
            assert [(j.workload["params"]["dtype"], j.baseline) for j in warmed] == [
                ("float16", None), ("float16", "cublas"),
                ("bfloat16", None), ("bfloat16", "cublas")]
            assert all(j.artifact.source for j in warmed[::2])
        if not warm:
            time.sleep(0.3)
            assert made == []
        response = client.post("/v1/tune", json={"op": "gemm", "params": GEMM,
                                                 "budget": {"trials": 4}})
        assert wait_for(client, response.json()["run"]["id"])["status"] == "succeeded"
    assert len(made) == 1  # the run measured on the executor started for it (or warmed)


def test_gpu_run_stores_kernel_baseline_and_calibration(
    fake_gpu: FakeProbe, gpu_settings: Settings
) -> None:
    gpu = ModelGpu(batch=4)
    with TestClient(create_app(gpu_settings, gpu_pool_factory=lambda d: gpu)) as client:
        body = {"op": "gemm", "params": GEMM, "budget": {"trials": 12}}  # device "auto"
        response = client.post("/v1/tune", json=body)
        assert response.status_code == 202, response.text
        run = wait_for(client, response.json()["run"]["id"])
        assert run["status"] == "succeeded", run
        assert run["device"] == "cuda:0" and run["simulated"] is False
        assert run["trials_done"] == 12 and run["best"]["simulated"] is False

        # Every round was prepared before it was measured; never the same kernel twice.
        # (The search's jobs have its quick timing; the leaders' and finalists' re-timings
        # the final one.)
        quick = gpu.kernel_jobs[0].timing
        searched = [j.artifact.schedule_hash for j in gpu.kernel_jobs if j.timing == quick]
        assert any(j.timing != quick for j in gpu.kernel_jobs)
        assert len(searched) == 12 and len(set(searched)) == 12
        # The first round measures the first two seeds alone (the GPU preset).
        assert [len(b) for b in gpu.prepared] == [2, 4, 4, 2]
        # No search round waits for cuBLAS's loading: it is timed with the finalists.
        assert not any(j.baseline for batch in gpu.batches[: len(gpu.prepared)]
                       for j in batch)

        # The baseline, re-timed with the finalists, and the speed against it.
        assert run["baseline"] == "cublas" and run["baseline_latency_us"] == CUBLAS_US
        best = run["best"]
        assert run["speedup_vs_baseline"] == pytest.approx(CUBLAS_US / best["latency_us"])
        assert run["peers"] == {} and run["speedups_vs_peers"] == {}  # GEMM: cuBLAS only
        assert gpu.baseline_jobs("sdpa_flash") == []

        # The kernel: its artifact and source are served, and it is the winner's.
        kernel_hash = best["kernel_hash"]
        assert kernel_hash is not None
        kernel = client.get(f"/v1/kernels/{kernel_hash}")
        assert kernel.status_code == 200
        artifact = KernelArtifact.from_dict(kernel.json()["artifact"])
        assert artifact.hash == kernel_hash == kernel.json()["hash"]
        assert artifact.schedule_hash == best["schedule_hash"]
        assert artifact.params == {**GEMM, "b_layout": "kn"}
        tensors = {getattr(a, "tensor", a.name) for a in artifact.args if a.kind != "scalar"}
        assert tensors == {"a", "b", "c"} and artifact.dynamic_smem_bytes > 0
        source = client.get(f"/v1/kernels/{kernel_hash}/source")
        assert source.status_code == 200 and source.text == artifact.source
        exported = client.get(f"/v1/kernels/{kernel_hash}/export")  # plain CUDA C++, zipped
        assert exported.headers["content-type"] == "application/zip"
        with zipfile.ZipFile(io.BytesIO(exported.content)) as archive:
            files = {name.split("/", 1)[1]: archive.read(name).decode()
                     for name in archive.namelist()}
        assert files["kernel.cu"] == artifact.source
        assert {"launch.cu", "example.cu", "BUILD.txt"} <= set(files)
        assert client.get(f"/v1/kernels/{'0' * 64}/export").status_code == 404

        # The cache entry carries the kernel and the comparison; a repeat answers from it.
        again = client.post("/v1/tune", json=body)
        assert again.status_code == 200 and again.json()["run"]["id"] == run["id"]
        cached = again.json()["schedule"]
        assert cached["kernel_hash"] == kernel_hash and cached["baseline"] == "cublas"
        assert cached["speedup_vs_baseline"] == pytest.approx(CUBLAS_US / cached["latency_us"])

        # The trials say what they measured: kernels, with sources design / search.
        trials = client.get(f"/v1/runs/{run['id']}/trials").json()["data"]
        ok = [t for t in trials if t["status"] == "ok"]
        assert len(ok) == 12 and not any(t["simulated"] for t in ok)
        assert {t["source"] for t in ok} >= {"design", "search"}

    # The run's measurements calibrated the device's cost model.
    db = Database(gpu_settings.database_url)
    try:
        with repo.session_scope(db.sessions) as session:
            device = repo.find_device(session, key=fingerprint_key(FINGERPRINT))
            stored = results_repo.find_calibration(session, device_id=device.id, op="gemm")
    finally:
        db.dispose()
    calibration = Calibration.from_dict(stored)
    assert calibration.samples == 12
    assert calibration.log_rmse_after < calibration.log_rmse_before
    assert calibration.unit_scale["tensor_core"] > 1.0  # towards TRUE_TENSOR_SCALE
    assert TRUE_TENSOR_SCALE > 1.0


def test_calibration_makes_the_next_run_predict_better(
    fake_gpu: FakeProbe, gpu_settings: Settings
) -> None:
    def error_of(client: TestClient, params: dict) -> float:
        body = {"op": "gemm", "params": params, "budget": {"trials": 8}}
        run = wait_for(client, client.post("/v1/tune", json=body).json()["run"]["id"])
        assert run["status"] == "succeeded", run
        trials = client.get(f"/v1/runs/{run['id']}/trials", params={"status": "ok"}).json()
        ratios = [t["latency_us"] / t["predicted_us"] for t in trials["data"]]
        return max(abs(r - 1.0) for r in ratios)

    with TestClient(create_app(gpu_settings, gpu_pool_factory=lambda d: ModelGpu())) as client:
        first = error_of(client, GEMM)  # uncalibrated: predictions off by ~TRUE_LEVEL
        second = error_of(client, OTHER_GEMM)  # ranked by the first run's calibration
    assert first > 0.3 and second < first / 2


def _stored_peers(database_url: str, run_id: int) -> dict[str, float] | None:
    db = Database(database_url)
    try:
        with repo.session_scope(db.sessions) as session:
            return repo.get_run(session, run_id=run_id).peer_latencies_us
    finally:
        db.dispose()


def test_gpu_attention_run_times_and_stores_both_peers(
    fake_gpu: FakeProbe, gpu_settings: Settings
) -> None:
    from scheduler_search.hardware import get_device
    from scheduler_search.ops.attention import AttentionSpec
    from scheduler_search.search import FINAL_TIMING
    from service.runs.jobs import timing_config

    gpu = ModelGpu(batch=4)
    with TestClient(create_app(gpu_settings, gpu_pool_factory=lambda d: gpu)) as client:
        body = {"op": "attention", "params": ATTENTION, "budget": {"trials": 8}}
        run = wait_for(client, client.post("/v1/tune", json=body).json()["run"]["id"])
        assert run["status"] == "succeeded", run
        assert run["device"] == "cuda:0" and run["trials_done"] == 8

        # cuDNN and FlashAttention-2 only in the final re-timing, interleaved with the
        # finalists: one of each per round, three rounds; no search round waits for them.
        searched = gpu.batches[: len(gpu.prepared)]
        rounds = [batch for batch in gpu.batches if any(j.baseline == "sdpa_flash"
                                                         for j in batch)]
        assert not any(j.baseline for batch in searched for j in batch)
        assert len(rounds) == 3
        for batch in rounds:
            assert [j.baseline for j in batch if j.baseline] in (
                ["sdpa_cudnn", "sdpa_flash"], ["sdpa_flash", "sdpa_cudnn"])
        flash = gpu.baseline_jobs("sdpa_flash")
        assert len(flash) == 3
        kernel = gpu.kernel_jobs[0]
        assert all(j.workload == kernel.workload and j.seed == kernel.seed
                   and j.timing.method == kernel.timing.method
                   and j.timing == timing_config(FINAL_TIMING.for_workload(
                       AttentionSpec(**ATTENTION), get_device("h200")))
                   and j.deadline_s == FINAL_TIMING.deadline_s
                   for j in flash)

        # The primary baseline as before; both peers' latencies with the run.
        best_us = run["best"]["latency_us"]
        assert run["baseline"] == "sdpa_cudnn" and run["baseline_latency_us"] == SDPA_CUDNN_US
        assert run["speedup_vs_baseline"] == pytest.approx(SDPA_CUDNN_US / best_us)
        assert run["peers"] == {"sdpa_flash": SDPA_FLASH_US}
        assert run["speedups_vs_peers"] == {"sdpa_flash": pytest.approx(SDPA_FLASH_US / best_us)}
        listed = client.get("/v1/runs", params={"op": "attention"}).json()["data"]
        assert [r["peers"] for r in listed] == [{"sdpa_flash": SDPA_FLASH_US}]
        page = client.get(f"/runs/{run['id']}").text  # the dashboard's run page
        assert "vs sdpa_flash: " in page and f"{SDPA_FLASH_US / best_us:.2f}×" in page
    assert _stored_peers(gpu_settings.database_url, run["id"]) == {"sdpa_flash": SDPA_FLASH_US}


def test_a_failing_peer_leaves_the_run_succeeded_without_it(
    fake_gpu: FakeProbe, gpu_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    gpu = ModelGpu(batch=4, failing_baselines={"sdpa_flash"})
    with TestClient(create_app(gpu_settings, gpu_pool_factory=lambda d: gpu)) as client:
        body = {"op": "attention", "params": ATTENTION, "budget": {"trials": 8}}
        run = wait_for(client, client.post("/v1/tune", json=body).json()["run"]["id"])
    assert run["status"] == "succeeded" and run["error"] is None, run
    assert len(gpu.baseline_jobs("sdpa_flash")) == 3  # it was timed, and failed each round
    assert run["best"]["kernel_hash"] is not None
    assert run["baseline"] == "sdpa_cudnn" and run["baseline_latency_us"] == SDPA_CUDNN_US
    assert run["peers"] == {} and run["speedups_vs_peers"] == {}
    assert _stored_peers(gpu_settings.database_url, run["id"]) == {}  # timed, none ok
    assert "peer sdpa_flash failed: sdpa_flash: not importable here" in caplog.text


@pytest.mark.parametrize("available", [True, False])
def test_mamba2_run_compares_with_mamba_ssm_or_says_it_has_no_baseline(
    fake_gpu: FakeProbe, gpu_settings: Settings, caplog: pytest.LogCaptureFixture,
    available: bool,
) -> None:
    """mamba_ssm's Triton chunk scan is the peer; where the worker cannot import it, the
    run still succeeds, stored and shown without a baseline figure."""
    gpu = ModelGpu(batch=4, failing_baselines=() if available else {"mamba_ssm_chunk_scan"})
    with TestClient(create_app(gpu_settings, gpu_pool_factory=lambda d: gpu)) as client:
        body = {"op": "mamba2_chunk_scan", "params": CHUNK_SCAN, "budget": {"trials": 6}}
        run = wait_for(client, client.post("/v1/tune", json=body).json()["run"]["id"])
        page = client.get(f"/runs/{run['id']}").text
        cached = client.post("/v1/tune", json=body).json()["schedule"]
    assert run["status"] == "succeeded" and run["error"] is None, run
    assert run["device"] == "cuda:0" and run["best"]["kernel_hash"] is not None
    # Timed in each round of the final re-timing, never in a search round.
    carrying = [i for i, batch in enumerate(gpu.batches)
                if any(j.baseline == "mamba_ssm_chunk_scan" for j in batch)]
    assert carrying and min(carrying) >= len(gpu.prepared)
    assert len(gpu.baseline_jobs("mamba_ssm_chunk_scan")) == 3
    assert run["baseline"] == cached["baseline"] == "mamba_ssm_chunk_scan"
    if available:
        best_us = run["best"]["latency_us"]
        assert run["baseline_latency_us"] == MAMBA_SSM_CHUNK_SCAN_US
        assert run["speedup_vs_baseline"] == pytest.approx(MAMBA_SSM_CHUNK_SCAN_US / best_us)
        assert cached["baseline_latency_us"] == MAMBA_SSM_CHUNK_SCAN_US
        assert "mamba_ssm_chunk_scan 150.00 µs ÷ ours" in page
    else:
        assert run["baseline_latency_us"] is None and run["speedup_vs_baseline"] is None
        assert cached["run_id"] == run["id"] and cached["baseline_latency_us"] is None
        assert cached["speedup_vs_baseline"] is None
        assert "no baseline: mamba_ssm_chunk_scan could not be measured" in page
        assert "baseline mamba_ssm_chunk_scan failed: mamba_ssm_chunk_scan: not importable" \
            in caplog.text
    # What a drop-in choosing between two cached kernels reads (pipetune.torch).
    figures = cached_figures(TuneRequest(op="mamba2_chunk_scan", params=CHUNK_SCAN,
                                         device="cuda:0"), gpu_settings.database_url)
    assert figures == {"latency_us": run["best"]["latency_us"],
                       "timing_method": cached["timing_method"],
                       "baseline": "mamba_ssm_chunk_scan",
                       "baseline_latency_us": MAMBA_SSM_CHUNK_SCAN_US if available else None}
    other = {**CHUNK_SCAN, "seqlen": 2048}
    assert cached_figures(TuneRequest(op="mamba2_chunk_scan", params=other, device="cuda:0"),
                          gpu_settings.database_url) is None


def test_cli_tune_on_the_gpu_prints_speed_vs_cublas_and_writes_the_kernel(
    fake_gpu: FakeProbe, gpu_settings: Settings, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], tmp_path,
) -> None:
    from service.cli import main
    from service.runs import executors

    monkeypatch.setattr(executors, "local_gpu_pool", lambda *args, **kwargs: ModelGpu())
    monkeypatch.setenv("PIPETUNE_COST_MODEL_SEEDS", "0")
    out_file = tmp_path / "kernel.json"
    argv = ["tune", "gemm", "--m", "2048", "--n", "2048", "--k", "2048", "--dtype", "float16",
            "--trials", "8", "--database-url", gpu_settings.database_url,
            "--kernel-out", str(out_file)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "on cuda:0 (run 1, 8 measured in" in out
    # ... timed by the GEMM's method, said with the speedup.
    method = timing_method(parse_spec("gemm", GEMM), resolve_device("cuda:0").model)
    assert f"vs cublas ({TIMING_METHOD_TEXT[method]}): {CUBLAS_US:.3f} us -> " in out
    assert "x (" in out
    assert "kernel: " in out and "(GET /v1/kernels/" in out
    artifact = KernelArtifact.from_dict(json.loads(out_file.read_text()))
    assert artifact.hash in out and artifact.op == "gemm"
    export_dir = tmp_path / "export"
    assert main(["export", artifact.hash, "--out", str(export_dir), "--database-url",
                 gpu_settings.database_url]) == 0
    assert (export_dir / "kernel.cu").read_text() == artifact.source
    assert "launch.cu" in capsys.readouterr().out
    assert main(["export", "f" * 64, "--out", str(export_dir), "--database-url",
                 gpu_settings.database_url]) == 1
    assert main([*argv, "--json"]) == 0
    cached = json.loads(capsys.readouterr().out)
    assert cached["cached"] is True and cached["kernel_hash"] == artifact.hash
    assert cached["speedup_vs_baseline"] == pytest.approx(CUBLAS_US / cached["latency_us"])


def test_cli_tune_of_attention_prints_both_peers(
    fake_gpu: FakeProbe, gpu_settings: Settings, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from service.cli import main
    from service.runs import executors

    monkeypatch.setattr(executors, "local_gpu_pool", lambda *args, **kwargs: ModelGpu())
    monkeypatch.setenv("PIPETUNE_COST_MODEL_SEEDS", "0")
    argv = ["tune", "attention", "--batch", "1", "--heads", "8", "--kv-heads", "2", "--seq",
            "700", "--head-dim", "64", "--causal", "--layout", "bhsd", "--trials", "6",
            "--database-url", gpu_settings.database_url]
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert main([*argv, "--json"]) == 0  # the cache hit: how the run timed them
    timed = TIMING_METHOD_TEXT[json.loads(capsys.readouterr().out)["timing_method"]]
    assert f"vs sdpa_cudnn ({timed}): {SDPA_CUDNN_US:.3f} us -> " in out
    assert f"vs sdpa_flash ({timed}): {SDPA_FLASH_US:.3f} us -> " in out


@pytest.mark.slow
def test_seed_process_ranks_distinct_structures_in_the_background() -> None:
    import time

    from scheduler_search.hardware import get_device
    from scheduler_search.ops import parse_spec
    from scheduler_search.search import structure_of
    from scheduler_search.space import ScheduleSpace
    from service.runs.seeds import SeedProcess

    spec, device = parse_spec("gemm", GEMM), get_device("h200")
    # The slice with two warp-specialised consumers and 64-deep k steps: 5 s of ranking in
    # the child (the whole space takes a minute, the slice without tile_k fixed 12 s).
    seeds = SeedProcess(spec, device, structures=6, raster_structures=2,
                        fixed={"warp_specialized": True, "consumer_warpgroups": 2,
                               "tile_k": 64})
    started = time.monotonic()
    first = seeds.poll()
    assert first is None  # not ready at once: the search starts without it
    while (found := seeds.poll()) is None:
        assert time.monotonic() - started < 300
        time.sleep(0.2)
    assert seeds.poll() == []  # given once
    seeds.close()
    assert len({structure_of(c) for c in found[:6]}) == 6  # six distinct structures first
    best = {structure_of(c) for c in found[:2]}
    rest = found[6:]
    # Then the best two alone and in clusters (those that differ in structure), then
    # their tile orders.
    twins = [c for c in rest if structure_of(c) not in best]
    assert twins and rest[: len(twins)] == twins
    assert {c.get("cluster_size") for c in twins} <= {1, 2}
    rasters = rest[len(twins):]
    assert len(rasters) == 2 * 2 * 3  # 2 structures x raster major (m, n) x swizzle (4, 8, 16)
    assert {structure_of(c) for c in rasters} <= best
    space = ScheduleSpace(spec, device)
    assert all(space.build(c)[1].ok for c in found)


def test_tuning_speed_bench_on_a_warm_pretend_gpu(
    fake_gpu: FakeProbe, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """``--warm``: the pool is warmed before the request, and the clock starts after."""
    from service.runs import executors

    pools: list[_Warmed] = []
    monkeypatch.setattr(executors, "local_gpu_pool",
                        lambda *args, **kwargs: pools.append(_Warmed()) or pools[-1])
    monkeypatch.setenv("PIPETUNE_COST_MODEL_SEEDS", "0")
    out = tmp_path / "speed.json"
    bench_module("tuning_speed").main(["--cases", "gemm:1024x1024x1024", "--seconds", "1", "--warm",
                                "--out", str(out)], fingerprint=dict(FINGERPRINT))
    (case,) = json.loads(out.read_text())["cases"]
    assert "error" not in case, case
    assert case["serve"] == "warm" and case["warm_up_s"] is not None
    assert len(pools) == 1 and pools[0].warmed_at is not None


def test_tuning_speed_bench_on_a_pretend_gpu(
    fake_gpu: FakeProbe, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    from service.runs import executors

    bench = bench_module("tuning_speed")
    monkeypatch.setattr(executors, "local_gpu_pool",
                        lambda *args, **kwargs: ModelGpu(measure_s=0.05))
    monkeypatch.setenv("PIPETUNE_COST_MODEL_SEEDS", "0")
    out = tmp_path / "speed.json"
    bench.main(["--cases", "gemm:1024x1024x1024", "--seconds", "3", "--out", str(out)],
               fingerprint=dict(FINGERPRINT))
    (case,) = json.loads(out.read_text())["cases"]
    assert "error" not in case, case
    assert case["peer"] == "cublas" and case["peer_us"] == CUBLAS_US
    assert case["speedup_vs_peer"] > 0 and case["serve"] == "cold"
    # The best-so-far curve from the request, its steps re-timed with the winner.
    assert case["best_so_far_curve"] and case["time_to_2pct_curve_s"] is not None
    assert case["winner_retimed_after_run_us"] > 0
    assert case["first_result_s"] <= case["winner_found_s"] <= case["wall_s"]
    assert any(step["retimed_us"] for step in case["best_so_far_steps"])
    assert bench.case_params("attention:2x16x4x1000x64c", "bfloat16", "kn") == ("attention", {
        "batch": 2, "heads": 16, "kv_heads": 4, "seq_q": 1000, "seq_kv": 1000, "head_dim": 64,
        "causal": True, "dtype": "bfloat16"})
    assert bench.case_params("attention:8x32x8x512x128-bhsd", "float16", "kn")[1] == {
        "batch": 8, "heads": 32, "kv_heads": 8, "seq_q": 512, "seq_kv": 512, "head_dim": 128,
        "causal": False, "dtype": "float16", "layout": "bhsd"}
    assert bench.case_params("attention_backward:8x32x8x2048x128c-bhsd", "bfloat16", "kn") == (
        "attention_backward", {"batch": 8, "heads": 32, "kv_heads": 8, "seq_q": 2048,
                               "seq_kv": 2048, "head_dim": 128, "causal": True,
                               "dtype": "bfloat16", "layout": "bhsd"})
    with pytest.raises(ValueError, match="bshd or bhsd"):
        bench.case_params("attention:8x32x8x512x128-sbhd", "float16", "kn")
    mamba = {"batch": 8, "seqlen": 4096, "nheads": 80, "headdim": 64, "dstate": 128,
             "ngroups": 1, "chunk_size": 256, "dtype": "float16"}
    assert bench.case_params("mamba2_chunk_scan:8x4096x80x64x128x256", "float16", "kn") == (
        "mamba2_chunk_scan", mamba)
    assert bench.case_params("mamba2_chunk_state:8x4096x80x64x128x256g8", "float16", "kn") \
        == ("mamba2_chunk_state", {**mamba, "ngroups": 8})
    assert case["time_to_2pct_curve_s"] is not None and case["time_to_2pct_retimed_s"] is not None
    curve = case["best_so_far_curve"]
    assert curve and [t for t, _ in curve] == sorted(t for t, _ in curve)
    assert all(step["retimed_us"] for step in case["best_so_far_steps"])
    assert case["trials_ok"] > 0 and case["stop_reason"] == "seconds"


def test_gpu_run_through_a_real_local_gpu_pool_with_stand_in_workers(
    fake_gpu: FakeProbe, tmp_path
) -> None:
    """The pool's own prepare/measure path (spawned stand-in worker, background compile)."""
    from workers import LocalGpuPool
    from workers.testing import StandinCompiler, standin_worker_main

    # No warm-up at the start: its two kernels would be a compile batch of their own,
    # before or after the run's first, as the threads go.
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'db.sqlite'}", data_dir=tmp_path,
                        max_concurrent_runs=1, cost_model_seeds=0, warm_executors=False)
    pools = []

    def factory(device):
        pools.append(LocalGpuPool(["0"], worker_entry=standin_worker_main,
                                  compiler=StandinCompiler(), batch_size=4))
        return pools[-1]

    with TestClient(create_app(settings, gpu_pool_factory=factory)) as client:
        body = {"op": "gemm", "params": GEMM, "budget": {"trials": 10}}
        run = wait_for(client, client.post("/v1/tune", json=body).json()["run"]["id"])
        assert run["status"] == "succeeded", run
        assert run["trials_done"] == 10 and run["baseline_latency_us"] == 10.0
        assert run["best"]["kernel_hash"] is not None
    (pool,) = pools
    compiled = pool._compiler.batches
    # By prepare, once each; a first round of two (the GPU preset).
    assert sum(compiled[:3]) == 10 and compiled[:3] == [2, 4, 4]


def test_operators_without_code_generation_stay_simulated(
    fake_gpu: FakeProbe, monkeypatch: pytest.MonkeyPatch
) -> None:
    import codegen
    from scheduler_search.ops.suites import REFERENCE_WORKLOADS
    from service.errors import InvalidRequest
    from service.runs.tune import prepare
    from service.schemas import TuneRequest

    scan = dict(REFERENCE_WORKLOADS["mamba2_chunk_scan"])
    settings = Settings()
    # Mamba2 has code generation: it is measured on the GPU.
    assert prepare(TuneRequest(op="mamba2_chunk_scan", params=scan), settings).device.name \
        == "cuda:0"
    # An operator without it (here: Mamba2 with its renderer hidden) is tuned on the
    # simulated GPU under "auto", and refused on the real one.
    has_renderer = codegen.has_renderer
    monkeypatch.setattr(codegen, "has_renderer", lambda op: op != "mamba2_chunk_scan"
                        and has_renderer(op))
    auto = prepare(TuneRequest(op="mamba2_chunk_scan", params=scan), settings)
    assert auto.device.name == "sim:h200" and auto.device.simulated
    with pytest.raises(InvalidRequest) as raised:
        prepare(TuneRequest(op="mamba2_chunk_scan", params=scan, device="cuda:0"), settings)
    (error,) = raised.value.errors
    assert error["loc"] == ("device",)
    assert "no code generation for 'mamba2_chunk_scan'" in error["msg"]
    gemm = prepare(TuneRequest(op="gemm", params=GEMM), settings)
    assert gemm.device.name == "cuda:0"
    attention = {"batch": 1, "heads": 8, "kv_heads": 8, "seq_q": 512, "seq_kv": 512,
                 "head_dim": 128, "causal": False, "dtype": "float16"}
    assert prepare(TuneRequest(op="attention", params=attention), settings).device.name \
        == "cuda:0"


@pytest.mark.slow
def test_cancel_acts_at_once_while_the_gpu_is_busy(
    fake_gpu: FakeProbe, gpu_settings: Settings
) -> None:
    """A GPU batch in flight and the finalists' re-timing take seconds after a cancel; the
    run is cancelled at once all the same, and its best is stored once they are done."""
    gpu = ModelGpu(batch=4, measure_s=1.0)
    with TestClient(create_app(gpu_settings, gpu_pool_factory=lambda d: gpu)) as client:
        body = {"op": "gemm", "params": GEMM, "budget": {"trials": 5000}}
        run = client.post("/v1/tune", json=body).json()["run"]
        wait_for(client, run["id"], lambda r: r["trials_done"] >= 4)
        asked = time.monotonic()
        cancelled = client.delete(f"/v1/runs/{run['id']}").json()
        assert time.monotonic() - asked < 2.0
        assert cancelled["status"] == "cancelled" and cancelled["phase"] == "stopping"
        again = client.post("/v1/tune", json=body).json()["run"]
        assert again["id"] != run["id"]
        # The new run is cancelled while it waits for the stopping one (it would measure,
        # and the app's shutdown wait for its batches and re-timing: seconds).
        assert client.delete(f"/v1/runs/{again['id']}").json()["status"] == "cancelled"
        done = wait_for(client, run["id"], lambda r: r["phase"] == "done", timeout_s=30.0)
        cached = client.get("/v1/schedules", params={"device": "cuda:0",
                                                     "params": json.dumps(GEMM)}).json()
    assert done["status"] == "cancelled" and done["best"]["kernel_hash"] is not None
    (entry,) = cached["data"]
    assert entry["run_id"] == run["id"] and entry["kernel_hash"] == done["best"]["kernel_hash"]


def test_tuning_speed_of_a_pipeline_on_a_pretend_gpu(
    fake_gpu: FakeProbe, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """``mamba2_ssd``: its kernels tuned one after the other, the pipeline's curve the
    cheapest plan of each kernel's best so far, ending at the final plan's cost."""
    from service.runs import executors

    bench = bench_module("tuning_speed")
    monkeypatch.setattr(executors, "local_gpu_pool",
                        lambda *args, **kwargs: ModelGpu(measure_s=0.02))
    monkeypatch.setenv("PIPETUNE_COST_MODEL_SEEDS", "0")
    out = tmp_path / "speed.json"
    bench.main(["--cases", "mamba2_ssd:1x512x8x64x64x128", "--seconds", "3", "--out",
                str(out)], fingerprint=dict(FINGERPRINT))
    (case,) = json.loads(out.read_text())["cases"]
    assert "error" not in case, case
    kernels = case["kernels"]
    assert set(kernels) == {"state", "scan", "scan_in_tile"}
    assert all(k["run"]["status"] == "succeeded" for k in kernels.values())
    assert kernels["scan_in_tile"]["params"]["cb_in_tile"] is True
    # One after the other: no kernel's first result before the one before it ended.
    starts = [k["best_so_far_curve"][0][0] for k in kernels.values()]
    assert starts == sorted(starts)
    curve = case["best_so_far_curve"]
    assert [c[1] for c in curve] == sorted((c[1] for c in curve), reverse=True)
    # The curve starts once a plan has all its kernels: the state and the scan reading cb.
    assert curve[0][0] >= kernels["scan"]["best_so_far_curve"][0][0]
    search = {role: k["best_so_far_curve"][-1][1] for role, k in kernels.items()}
    assert curve[-1][1] == pytest.approx(min(search["state"] + search["scan"],
                                             search["state"] + search["scan_in_tile"]))
    assert case["time_to_2pct_curve_s"] is not None
    assert case["final_plan"] in ("cb", "cb_in_tile") and case["final_best_us"] > 0
