"""``pipetune.tune``: a tune in this process (the simulated H200 here), answered as the
client answers, then from the cache; wrong arguments raise the client's typed error
naming the field."""

from __future__ import annotations

import pytest

import pipetune


def test_tune_in_process_then_from_the_cache(database_url: str) -> None:
    params = {"m": 1024, "n": 1024, "k": 1024, "dtype": "float16"}
    first = pipetune.tune("gemm", device="sim:h200", budget={"trials": 8},
                          database_url=database_url, progress=False, **params)
    assert isinstance(first, pipetune.TuneResult)
    assert first.status == "succeeded" and not first.cached
    assert first.run is not None and first.run["trials_done"] == 8
    assert first.latency_us is not None and first.latency_us > 0
    assert first.schedule is not None and first.schedule["workload"]["params"]["m"] == 1024
    again = pipetune.tune("gemm", device="sim:h200", budget={"trials": 8},
                          database_url=database_url, progress=False, **params)
    assert again.cached and again.status == "cached"
    assert again.run is not None and again.run_id == first.run_id == first.run["id"]
    assert again.latency_us == first.latency_us and again.kernel_hash == first.kernel_hash
    assert again.kernel == first.kernel


@pytest.mark.parametrize(
    ("op", "kwargs", "field"),
    [
        ("gemm", {"m": 1024, "n": 1023, "k": 1024}, "params.n"),
        ("gemm", {"m": 0, "n": 64, "k": 64}, "params.m"),
        ("gemm", {"m": 64, "n": 64, "k": 64, "device": "tpu"}, "device"),
        ("gemm", {"m": 64, "n": 64, "k": 64, "budget": {"trials": 0}}, "budget.trials"),
        ("conv", {"m": 64}, "op"),
    ],
)
def test_bad_arguments_raise_bad_request_naming_the_field(
    op: str, kwargs: dict, field: str, tmp_path
) -> None:
    with pytest.raises(pipetune.BadRequest) as raised:
        pipetune.tune(op, database_url=f"sqlite:///{tmp_path / 'local.db'}", progress=False,
                      **kwargs)
    assert raised.value.field == field, raised.value.detail


@pytest.mark.timeout(120)
def test_a_run_left_running_by_a_stopped_process_is_taken_over(settings) -> None:
    """A server (or a killed ``pipetune.tune``) that stopped mid-run leaves its run
    `running`; a later in-process tune of the workload resumes it instead of waiting."""
    from fastapi.testclient import TestClient
    from service_helpers import SMALL_GEMM, tune_body, wait_for

    from service.main import create_app

    with TestClient(create_app(settings)) as client:
        run = client.post("/v1/tune", json=tune_body(trials=24)).json()["run"]
        wait_for(client, run["id"], lambda r: r["trials_done"] >= 4)
    result = pipetune.tune("gemm", device="sim:h200", budget={"trials": 24},
                           database_url=settings.database_url, progress=False, **SMALL_GEMM)
    assert result.run is not None and result.run["id"] == run["id"]
    assert result.status == "succeeded" and result.run["trials_done"] == 24
    assert result.run["attempts"] == 2


def test_optuna_opens_the_runs_study_in_pipetunes_database(database_url: str) -> None:
    """What the README promises users of Optuna's tools (optuna-dashboard): each run's
    study is in pipetune's own database, under ``pipetune-run-N``, with its trials."""
    import optuna

    result = pipetune.tune("gemm", device="sim:h200", budget={"trials": 8},
                           database_url=database_url, progress=False,
                           m=512, n=512, k=512, dtype="float16")
    assert result.run is not None
    study = optuna.load_study(study_name=f"pipetune-run-{result.run['id']}",
                              storage=database_url)
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(complete) == 8 and study.best_value > 0


@pytest.mark.parametrize(("device", "arch", "dtype"), [("sim:a100", "sm_80", "bfloat16"),
                                                      ("sim:l40s", "sm_89", "bfloat16"),
                                                      ("sim:l40s", "sm_89", "float8_e4m3")])
def test_a_simulated_ampere_class_run_returns_a_kernel_of_its_architecture(
        device: str, arch: str, dtype: str, database_url: str) -> None:
    """Tuned on the cost model as Hopper's simulated runs are, and answered with the
    kernel the space's best schedule generates there: cp.async and mma.sync, built for
    the architecture (nvcc compiles it without spills where nvcc is here)."""
    from codegen.artifact import KernelArtifact
    from codegen.nvcc import compile_report, nvcc_path
    from codegen.targets import target_for

    result = pipetune.tune("gemm", device=device, budget={"trials": 6}, database_url=database_url,
                           progress=False, m=1024, n=1024, k=1024, dtype=dtype, b_layout="nk")
    assert result.status == "succeeded" and result.kernel is not None
    artifact = KernelArtifact.from_dict(result.kernel)
    assert artifact.compile_options == ("-std=c++17", f"-arch={arch}")
    shape = "m16n8k32.row.col.f32.e4m3" if dtype == "float8_e4m3" else "m16n8k16.row.col.f32.bf16"
    assert f"mma.sync.aligned.{shape}" in artifact.source
    if nvcc_path() is not None:
        report = compile_report(artifact.source, target=target_for(arch))
        assert report.ok and report.spills == 0, report.log[-500:]


def test_the_attention_backward_is_tuned_on_the_simulated_device(database_url: str) -> None:
    """The cost model's run over the generated space: a schedule and its kernel, which
    writes dk, dv and dq through the workspace it leaves at zeros."""
    result = pipetune.tune("attention_backward", device="sim:h200", budget={"trials": 6},
                           database_url=database_url, progress=False, batch=1, heads=8,
                           kv_heads=2, seq_q=1024, seq_kv=1024, head_dim=128, causal=True,
                           dtype="bfloat16")
    assert result.status == "succeeded" and result.kernel is not None
    assert result.schedule is not None and result.latency_us is not None
    assert result.schedule["workload"]["op"] == "attention_backward"
    args = {a["name"]: a["kind"] for a in result.kernel["args"]}
    assert {args[n] for n in ("dq", "dk", "dv")} == {"tensor"}
    assert args["dq_accum"] == args["dq_count"] == "workspace"
