"""bench/decode.py without a GPU: its case list (weight shapes deduplicated across models,
the layers each serves, the filters), the weight-copy and layer rules that keep weights out
of the L2, the bandwidth arithmetic, the agreement flag, the correctness gate, what it
reads of a TuneResult, and the summary over rows its own functions build."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import decode
from bench.common import geomean
from pipetune.results import TuneResult
from scheduler_search.ops import parse_spec

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20


def test_the_module_imports_without_torch_or_cupy() -> None:
    code = ("import sys; sys.path.insert(0, '.'); import bench.decode; "
            "print(sorted({'torch', 'cupy', 'triton'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]"


def test_cases_deduplicate_weight_shapes_and_name_every_layer_they_serve() -> None:
    cases = decode.decode_cases()
    shapes = {shape for layers in decode.MODELS.values() for shape in layers.values()}
    assert len(cases) == len(shapes) * len(decode.M_SIZES) * len(decode.DTYPES)
    assert len({c.key for c in cases}) == len(cases)
    served = {(c.n, c.k): c.layers for c in cases}
    # Llama-3-8B's down projection and Mixtral's w2 are the same 4096 x 14336 weight.
    assert served[(4096, 14336)] == ("llama-3-8b/down", "mixtral-8x7b/w2")
    every_layer = sorted(layer for layers in served.values() for layer in layers)
    assert every_layer == sorted(f"{model}/{layer}" for model, layers in decode.MODELS.items()
                                 for layer in layers)
    for case in cases:
        assert decode.MODELS[case.layers[0].split("/")[0]][case.layers[0].split("/")[1]] == (
            case.n, case.k)


@pytest.mark.parametrize("dtype", decode.DTYPES)
def test_every_case_is_a_workload_the_service_accepts(dtype: str) -> None:
    for case in decode.decode_cases(dtypes=[dtype], ms=[1, 256]):
        params = parse_spec("gemm", case.params()).params()
        assert (params["m"], params["n"], params["k"]) == (case.m, case.n, case.k)
        assert params["dtype"] == dtype and params["b_layout"] == "nk"
        assert case.name.startswith(f"gemm-{case.m}x{case.n}x{case.k}-")


def test_filters_select_models_sizes_dtypes_and_a_leading_subset() -> None:
    cases = decode.decode_cases(["llama-3-8b"], [1, 16, 128], ["bfloat16"])
    assert [(c.n, c.k, c.m) for c in cases] == [
        (n, k, m) for n, k in decode.MODELS["llama-3-8b"].values() for m in (1, 16, 128)]
    assert all(c.dtype == "bfloat16" and len(c.layers) == 1 for c in cases)  # no Mixtral
    assert decode.decode_cases(["llama-3-8b"], [1, 16, 128], ["bfloat16"], limit=4) == cases[:4]
    fp8_first = decode.decode_cases(["mixtral-8x7b"], [2], ["float8_e4m3", "bfloat16"])
    assert [c.dtype for c in fp8_first] == ["float8_e4m3"] * 2 + ["bfloat16"] * 2
    with pytest.raises(ValueError, match="unknown models"):
        decode.decode_cases(["llama-2-7b"])


def test_weights_keep_only_those_matrices_of_the_models() -> None:
    models = ["llama-3-70b-tp8", "mixtral-8x7b"]
    kept = [(8192, 1024), (4096, 14336)]
    cases = decode.decode_cases(models, [4, 64], ["bfloat16"], weights=kept)
    assert [(c.n, c.k, c.m) for c in cases] == [
        (8192, 1024, 4), (8192, 1024, 64), (4096, 14336, 4), (4096, 14336, 64)]
    assert cases[-1].layers == ("mixtral-8x7b/w2",)
    with pytest.raises(ValueError, match="4096x4096"):  # Llama-3-8B's, not these models'
        decode.decode_cases(models, weights=[(4096, 4096)])
    assert decode.weight_shape("7168X8192") == (7168, 8192)
    with pytest.raises(argparse.ArgumentTypeError, match="NxK"):
        decode.weight_shape("7168")


def test_a_model_step_needs_every_matrix_among_the_cases() -> None:
    models, ms = ["llama-3-8b", "mixtral-8x7b"], [1, 16]
    everything = decode.decode_cases(models, ms, ["bfloat16"])
    keys = {c.key for c in everything}
    assert decode.model_steps(models, ms, ["bfloat16"], keys) == [
        (model, m, "bfloat16") for model in models for m in ms]
    # The first 6 cases: llama's qkv, o and gate_up at both m; its down (Mixtral's w2) is cut.
    assert decode.model_steps(models, ms, ["bfloat16"], {c.key for c in everything[:6]}) == []
    eight_b = decode.decode_cases(["llama-3-8b"], ms, ["bfloat16"])
    assert decode.model_steps(models, ms, ["bfloat16"], {c.key for c in eight_b}) == [
        ("llama-3-8b", 1, "bfloat16"), ("llama-3-8b", 16, "bfloat16")]


@pytest.mark.parametrize("weight_mib", [1, 8, 20, 56, 120, 235])
def test_weight_copies_exceed_twice_the_l2(weight_mib: int) -> None:
    l2_bytes = 60 * MIB
    copies = decode.weight_copies(weight_mib * MIB, l2_bytes)
    assert copies >= 2 and copies * weight_mib * MIB > 2 * l2_bytes
    assert (copies - 2) * weight_mib * MIB <= 2 * l2_bytes  # no more than it takes


def test_the_copy_rule_goes_past_launch_overheads_cap_and_keeps_its_own() -> None:
    from workers.graph_timing import MAX_COPIES

    assert decode.weight_copies(1 * MIB, 60 * MIB) == 121  # launch_overhead's rule: 8
    assert decode.weight_copies(1024, 60 * MIB) == MAX_COPIES
    assert decode.weight_copies(1 << 30, 60 * MIB) == 2


def test_graphs_read_every_copy_equally_and_steps_hold_enough_layers() -> None:
    for copies, least in ((2, 100), (7, 100), (121, 100), (5, 5)):
        calls = decode.graph_calls(copies, least)
        assert calls >= least and calls % copies == 0 and calls - copies < least
    assert decode.step_layers(200 * MIB, 60 * MIB, 4) == 4
    layers = decode.step_layers(25 * MIB, 60 * MIB, 1)
    assert layers * 25 * MIB > 2 * 60 * MIB and (layers - 1) * 25 * MIB <= 2 * 60 * MIB


def test_bandwidth_counts_weight_activation_and_output_bytes() -> None:
    bf16 = decode.Case(4096, 14336, 16, "bfloat16", ("llama-3-8b/down",))
    assert bf16.traffic_bytes == 2 * 4096 * 14336 + 2 * 16 * 14336 + 2 * 16 * 4096
    fp8 = decode.Case(4096, 14336, 16, "float8_e4m3", ("llama-3-8b/down",))
    assert fp8.traffic_bytes == 4096 * 14336 + 16 * 14336 + 2 * 16 * 4096  # bf16 output
    assert fp8.weight_bytes * 2 == bf16.weight_bytes
    figure = decode.bandwidth(bf16.traffic_bytes, 40.0)
    assert figure["tbps"] == pytest.approx(bf16.traffic_bytes / 40e-6 / 1e12)
    assert figure["fraction_of_copy_ceiling"] == pytest.approx(
        figure["tbps"] / decode.COPY_CEILING_TBPS)
    assert decode.bandwidth(4_300_000, 1.0)["fraction_of_copy_ceiling"] == pytest.approx(1.0)


@pytest.mark.parametrize(("stored", "graph", "flagged"), [
    (1.10, 1.10, False), (1.04, 1.0, False), (0.96, 1.0, False), (1.06, 1.0, True),
    (0.9, 1.0, True), (1.0, 1.2, True)])
def test_agreement_is_flagged_past_five_percent(stored: float, graph: float,
                                                flagged: bool) -> None:
    found = decode.agreement(stored, graph)
    assert found["agreement"] == pytest.approx(stored / graph)
    assert found["flagged"] is flagged


def test_agreement_without_a_stored_speedup_is_unknown() -> None:
    assert decode.agreement(None, 1.1) == {"agreement": None, "flagged": None}


def test_the_correctness_gate_per_dtype() -> None:
    good_vs_peer = {"rel_error_vs_peer": 5e-3, "rel_error_vs_fp32": 5e-2}
    assert decode.correctness_error("bfloat16", good_vs_peer) is None
    assert "rel_error_vs_fp32" in decode.correctness_error("float8_e4m3", good_vs_peer)
    fp8_ok = {"rel_error_vs_peer": 3e-2, "rel_error_vs_fp32": 1.5e-2}
    assert decode.correctness_error("float8_e4m3", fp8_ok) is None
    assert "rel_error_vs_peer" in decode.correctness_error("bfloat16", fp8_ok)
    nan = {"rel_error_vs_peer": math.nan, "rel_error_vs_fp32": math.nan}
    assert decode.correctness_error("bfloat16", nan) is not None
    assert decode.correctness_error("float8_e4m3", nan) is not None


def test_the_weight_cycle_remembers_the_copy_it_read() -> None:
    cycle = decode._Cycle([lambda i=i: i for i in range(3)])
    assert [cycle() for _ in range(5)] == [0, 1, 2, 0, 1]
    assert cycle.last == 1


def _run(**fields: Any) -> dict[str, Any]:
    return {"id": 7, "status": "succeeded", "trials_done": 64, "baseline": "cublas",
            "baseline_latency_us": 30.0, "speedup_vs_baseline": 1.2,
            "best": {"latency_us": 25.0, "kernel_hash": "k" * 8}, **fields}


def test_the_runs_stored_figures_with_or_without_a_timing_method() -> None:
    kernel = {"schedule_hash": "s" * 8, "extra": {"choices": {"tile_n": 64}}}
    result = TuneResult(cached=False, run=_run(), kernel=kernel)
    stored = decode.stored_figures(result)
    assert stored == {"status": "succeeded", "run_id": 7, "kernel_hash": "k" * 8, "trials": 64,
                      "latency_us": 25.0, "baseline": "cublas", "baseline_latency_us": 30.0,
                      "speedup_vs_baseline": 1.2, "timing_method": None}
    assert decode.schedule_of(result) == {"schedule_hash": "s" * 8, "choices": {"tile_n": 64}}
    graph = TuneResult(cached=False, run=_run(timing_method="graph"), kernel=kernel)
    assert decode.stored_figures(graph)["timing_method"] == "graph"
    schedule = {"schedule_hash": "t" * 8, "choices": {"tile_n": 128}, "latency_us": 24.0,
                "kernel_hash": "j" * 8, "baseline": "scaled_mm", "baseline_latency_us": 36.0,
                "speedup_vs_baseline": 1.5, "timing_method": "events"}
    cached = TuneResult(cached=True, schedule=schedule, run=_run(), kernel=kernel)
    stored = decode.stored_figures(cached)
    assert (stored["latency_us"], stored["baseline"], stored["speedup_vs_baseline"],
            stored["timing_method"]) == (24.0, "scaled_mm", 1.5, "events")
    assert decode.schedule_of(cached) == {"schedule_hash": "t" * 8, "choices": {"tile_n": 128}}


def _row(case: decode.Case, ours_us: float, peer_us: float, stored: float | None,
         error: str | None = None) -> dict[str, Any]:
    """A case's row as time_case and measure_case shape it, the graph figure as given and
    the eager and back-to-back figures a little slower."""
    row: dict[str, Any] = {"case": case.name, "params": case.params(),
                           "layers": list(case.layers), "traffic_bytes": case.traffic_bytes,
                           "stored": {"speedup_vs_baseline": stored}}
    if error:
        return row | {"error": error}
    figures: dict[str, dict[str, Any]] = {"pipetune": {}, "peer": {}}
    for label, us in (("pipetune", ours_us), ("peer", peer_us)):
        for figure, scale in (("graph", 1.0), ("eager", 2.0), ("back_to_back", 1.1)):
            figures[label][f"{figure}_us"] = us * scale
            figures[label][f"{figure}_bandwidth"] = decode.bandwidth(case.traffic_bytes,
                                                                     us * scale)
    row |= figures
    for figure in decode.FIGURES:
        row[f"{figure}_ratio"] = peer_us / ours_us
    row["agreement"] = decode.agreement(stored, row["graph_ratio"])
    return row


def _step(model: str, m: int, dtype: str, ours_us: float, peer_us: float) -> dict[str, Any]:
    return {"model": model, "m": m, "dtype": dtype, "layers": 4,
            "pipetune": {"layer_us": ours_us}, "peer": {"layer_us": peer_us},
            "ratio": peer_us / ours_us}


def _fabricated() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    bf16 = decode.decode_cases(["llama-3-8b"], [1, 16], ["bfloat16"])
    fp8 = decode.decode_cases(["llama-3-8b"], [1], ["float8_e4m3"])
    timings = [(10.0, 11.0, 1.1), (20.0, 19.0, 0.95), (30.0, 36.0, 1.3), (40.0, 44.0, None),
               (12.0, 12.0, 1.0), (8.0, 10.0, 1.25), (50.0, 45.0, 0.9), (9.0, 9.9, 1.1)]
    rows = [_row(c, *t) for c, t in zip(bf16, timings, strict=True)]
    rows += [_row(fp8[0], 6.0, 6.6, 1.1), _row(fp8[1], 7.0, 7.0, None, error="no kernel")]
    rows += [_row(c, 10.0, 9.0, 0.9) for c in fp8[2:]]
    steps = [_step("llama-3-8b", 1, "bfloat16", 100.0, 110.0),
             _step("llama-3-8b", 16, "bfloat16", 120.0, 108.0),
             {"model": "llama-3-8b", "m": 1, "dtype": "float8_e4m3", "error": "no kernel"}]
    return rows, steps


def test_the_summary_per_dtype_over_rows_its_functions_built() -> None:
    rows, steps = _fabricated()
    summary = decode.summarise(rows, steps)
    bf16 = [r for r in rows if r["params"]["dtype"] == "bfloat16"]
    entry = summary["bfloat16"]
    assert entry["cases"] == len(bf16) == 8
    for figure in decode.FIGURES:
        assert entry[f"{figure}_ratio_geomean"] == pytest.approx(
            geomean([r["peer"][f"{figure}_us"] / r["pipetune"][f"{figure}_us"] for r in bf16]))
    least = min(bf16, key=lambda r: r["peer"]["graph_us"] / r["pipetune"]["graph_us"])
    assert entry["graph_ratio_min"] == {"case": least["case"], "ratio": least["graph_ratio"]}
    assert entry["agreement_flagged"] == sorted(
        r["case"] for r in bf16 if r["stored"]["speedup_vs_baseline"] is not None
        and abs(r["stored"]["speedup_vs_baseline"] / r["graph_ratio"] - 1) > 0.05)
    assert entry["step_ratio_geomean"] == pytest.approx(geomean([1.1, 0.9]))
    assert entry["step_ratio_min"] == {"model": "llama-3-8b", "m": 16, "ratio": 0.9}
    fp8_ok = [r for r in rows if r["params"]["dtype"] == "float8_e4m3" and "error" not in r]
    assert summary["float8_e4m3"]["cases"] == len(fp8_ok) == 3
    assert "step_ratio_geomean" not in summary["float8_e4m3"]
    assert summary["errors"] == [r["case"] for r in rows if "error" in r]
    assert summary["step_errors"] == ["llama-3-8b m=1 float8_e4m3"]


def test_the_table_prints_cases_failures_and_steps(capsys: pytest.CaptureFixture) -> None:
    rows, steps = _fabricated()
    decode.print_header()
    for row in rows:
        decode.print_case(row)
    for step in steps:
        decode.print_step(step)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + len(rows) + len(steps)
    assert any(line.endswith("no kernel") for line in lines)
    flagged = [line for line in lines if " ! " in line]
    assert flagged
    assert len(flagged) == sum(1 for r in rows if "error" not in r and r["agreement"]["flagged"])


def test_main_parses_the_filters_and_writes_the_document(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    rows, steps = _fabricated()
    seen: dict[str, Any] = {}

    def fake_run(args: Any, workdir: Path) -> dict[str, Any]:
        seen.update(vars(args))
        return {"suite": "decode", "cases": rows, "steps": steps,
                "summary": decode.summarise(rows, steps)}

    monkeypatch.setattr(decode, "run", fake_run)
    out = tmp_path / "decode.json"
    code = decode.main(["--models", "llama-3-8b", "--m", "1", "16", "128", "--dtypes",
                        "bfloat16", "--seconds", "3", "--limit", "5", "--layers", "0",
                        "--out", str(out)])
    assert code == 1  # the fabricated rows hold a failed case
    assert (seen["models"], seen["m"], seen["dtypes"]) == (["llama-3-8b"], [1, 16, 128],
                                                           ["bfloat16"])
    assert (seen["seconds"], seen["limit"], seen["layers"]) == (3.0, 5, 0)
    assert json.loads(out.read_text())["summary"]["bfloat16"]["cases"] == 8


def test_steps_from_earlier_runs_take_each_matrix_s_latest_kernel() -> None:
    """``--steps-from``: the model steps of the 70B's shards on the kernels that the runs
    of 2026-12-05 tuned, every m at which all four of its matrices have one (its o
    projection was not run at 32 and 64 tokens), a later file's case over an earlier's."""
    results = Path(decode.__file__).resolve().parent / "results"
    files = [results / f"decode-bf16-llama-3-70b-tp8-{part}.json"
             for part in ("2026-12-05-partial", "m128-256-2026-12-05",
                          "gate-up-down-m1-64-2026-12-05", "o-m4-16-2026-12-05-partial")]
    stored = decode.stored_schedules(files)
    steps = decode.model_steps(["llama-3-70b-tp8"], decode.M_SIZES, ["bfloat16"], stored)
    assert [m for _, m, _ in steps] == [1, 2, 4, 8, 16, 128, 256]
    later = json.loads(files[1].read_text())["cases"]
    (qkv_256,) = [c for c in later if c["case"] == "gemm-256x1280x8192-bf16-nk"]
    assert stored[(1280, 8192, 256, "bfloat16")]["choices"] == qkv_256["schedule"]["choices"]
