"""Fit the calibration pipetune ships for a GPU from the project's own benchmark results.

Reads GEMM suite results (``bench/results/gemm-*.json``: each case's tuned schedule and
its measured latency, timed against cuBLAS on the GPU), plans each winner's sProgram
again from its choices, fits ``scheduler_search.cost_model.fit_to_suite`` (the worst
relative error over the cases, smallest) and writes the calibration, its sources and its
error on every case into ``scheduler_search/cost_model/data/calibrations.json``, the
simulated device's default. Runs on any machine (no GPU: the measurements are in the
files). Prints the per-case table.

    .venv/bin/python bench/calibrate.py bench/results/gemm-2026-11-29.json \\
        bench/results/gemm-3shapes-2026-12-01.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scheduler_search.cost_model import Sample, fit_to_suite  # noqa: E402
from scheduler_search.cost_model.shipped import DATA_FILE  # noqa: E402
from scheduler_search.hardware import get_device  # noqa: E402
from scheduler_search.ops import parse_spec  # noqa: E402
from scheduler_search.sprogram import plan_sprogram  # noqa: E402

DATA_PATH = ROOT / "scheduler_search" / "cost_model" / "data" / DATA_FILE


def suite_samples(paths: list[Path], device_name: str) -> list[tuple[str, Sample]]:
    """Every case's tuned kernel in the results files, as (case label, sample)."""
    device = get_device(device_name)
    samples = []
    for path in paths:
        doc = json.loads(path.read_text())
        for case in doc["cases"]:
            if not case.get("choices") or not case.get("pipetune_us"):
                continue
            spec = parse_spec("gemm", case["params"])
            sprogram = plan_sprogram(spec, device, case["choices"])
            label = f"{path.name}:{case['case']}"
            samples.append((label, Sample(sprogram, spec, float(case["pipetune_us"]))))
    return samples


def held_out_errors(labelled: list[tuple[str, Sample]], device: Any) -> dict[str, float]:
    """Each case's error under a calibration fitted without its shape (m, n, k): how
    the calibration does on a shape it has not seen."""
    def shape(sample: Sample) -> tuple:
        params = sample.spec.params()
        return params["m"], params["n"], params["k"]

    errors = {}
    for held in {shape(s) for _, s in labelled}:
        rest = [s for _, s in labelled if shape(s) != held]
        calibration = fit_to_suite(rest, device)
        for label, sample in labelled:
            if shape(sample) == held:
                predicted = calibration.predict_us(sample.sprogram, sample.spec, device)
                errors[label] = predicted / sample.latency_us - 1
    return errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path, help="GEMM suite results files")
    parser.add_argument("--device", default="h200", help="catalog device the results ran on")
    parser.add_argument("--out", type=Path, default=DATA_PATH)
    args = parser.parse_args(argv)

    device = get_device(args.device)
    labelled = suite_samples(args.results, args.device)
    calibration = fit_to_suite([s for _, s in labelled], device)
    held_out = held_out_errors(labelled, device)
    cases: list[dict[str, Any]] = []
    for label, sample in labelled:
        predicted = calibration.predict_us(sample.sprogram, sample.spec, device)
        error = predicted / sample.latency_us - 1
        cases.append({"case": label, "measured_us": round(sample.latency_us, 3),
                      "simulated_us": round(predicted, 3), "error": round(error, 4),
                      "held_out_error": round(held_out[label], 4)})
        print(f"{label:60s} measured {sample.latency_us:9.1f} us  simulated "
              f"{predicted:9.1f} us  {error:+6.1%}  (shape held out: {held_out[label]:+6.1%})")
    worst = max(abs(c["error"]) for c in cases)
    worst_held_out = max(abs(c["held_out_error"]) for c in cases)
    print(f"{len(cases)} cases, worst error {worst:.1%}, "
          f"with each shape held out of the fit {worst_held_out:.1%}")

    data = json.loads(args.out.read_text()) if args.out.exists() else {}
    data.setdefault("devices", {}).setdefault(device.name, {})["gemm"] = {
        "calibration": calibration.to_dict(),
        "fitted_on": datetime.date.today().isoformat(),
        "sources": [str(p.relative_to(ROOT)) if p.is_absolute() else str(p)
                    for p in args.results],
        "worst_error": round(worst, 4),
        "worst_held_out_error": round(worst_held_out, 4),
        "cases": cases,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
