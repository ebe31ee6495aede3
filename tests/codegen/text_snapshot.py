"""The generated CUDA of a fixed sample of schedules, by hash: a refactor of code
generation must leave every kernel's text as it was, so every GPU figure measured on it
still holds (``test_generated_text.py`` checks it).

The sample (``SAMPLE``) spans the four operators: GEMM in both B layouts, 16- and 8-bit,
few tokens (swapped tiles), fused epilogues and m at run time; attention in both layouts,
GQA, causal, head sizes 64 and 128, a length no tile divides; Mamba2's chunk scan and
chunk state. Each entry keeps the operator, its params, the schedule's choices and its
run-time dimensions, so the test plans and renders it again without the sampler (a new
knob or option in the space changes what is sampled, not what a stored schedule is).

When a change means to alter the text of existing schedules (and bumps the operator's
hooks version, so no cached kernel of the old text is served as the new), write the
snapshot again and commit it with the change:

    python tests/codegen/text_snapshot.py --update
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = Path(__file__).with_name("data") / "generated_text.json"
DEVICE_NAME = "h200"

_MAMBA2 = {"nheads": 80, "headdim": 64, "dstate": 128, "ngroups": 1, "chunk_size": 256,
           "dtype": "float16"}
_ATTENTION = {"batch": 1, "heads": 32, "kv_heads": 8, "seq_q": 2048, "seq_kv": 2048,
              "head_dim": 128, "causal": True, "dtype": "float16"}

#: (operator, params, schedules drawn, seed); GEMMs with m at run time are drawn at m and
#: rendered with ``runtime_dims = ("m",)`` where code generation takes that.
SAMPLE: tuple[tuple[str, dict[str, Any], int, int], ...] = (
    ("gemm", {"m": 4096, "n": 4096, "k": 4096, "dtype": "float16", "b_layout": "kn"}, 40, 1),
    ("gemm", {"m": 4000, "n": 6000, "k": 2000, "dtype": "bfloat16", "b_layout": "nk"}, 40, 2),
    ("gemm", {"m": 8192, "n": 28672, "k": 8192, "dtype": "bfloat16", "b_layout": "nk"}, 30, 3),
    ("gemm", {"m": 1, "n": 4096, "k": 4096, "dtype": "bfloat16", "b_layout": "nk"}, 30, 4),
    ("gemm", {"m": 16, "n": 14336, "k": 4096, "dtype": "float16", "b_layout": "kn"}, 30, 5),
    ("gemm", {"m": 128, "n": 1280, "k": 8192, "dtype": "bfloat16", "b_layout": "nk"}, 30, 6),
    ("gemm", {"m": 4096, "n": 4096, "k": 4096, "dtype": "float8_e4m3", "b_layout": "nk"},
     30, 7),
    ("gemm", {"m": 16, "n": 4096, "k": 4096, "dtype": "float8_e4m3", "b_layout": "nk"},
     20, 8),
    ("gemm", {"m": 4096, "n": 4096, "k": 4096, "dtype": "float16", "b_layout": "nk",
              "epilogue": {"bias": True, "act": "gelu_tanh", "residual": True}}, 30, 9),
    ("gemm", {"m": 16384, "n": 4096, "k": 4096, "dtype": "bfloat16", "b_layout": "nk",
              "runtime_m": True}, 40, 10),
    ("attention", _ATTENTION, 40, 11),
    ("attention", {**_ATTENTION, "layout": "bhsd", "batch": 2, "seq_q": 1000,
                   "seq_kv": 1000, "dtype": "bfloat16"}, 30, 12),
    ("attention", {**_ATTENTION, "batch": 8, "heads": 16, "kv_heads": 16, "seq_q": 4096,
                   "seq_kv": 4096, "head_dim": 64, "causal": False}, 30, 13),
    ("attention", {**_ATTENTION, "seq_q": 3000, "seq_kv": 3000, "causal": False}, 20, 14),
    ("mamba2_chunk_scan", {**_MAMBA2, "batch": 8, "seqlen": 4096}, 40, 15),
    ("mamba2_chunk_state", {**_MAMBA2, "batch": 8, "seqlen": 4096}, 40, 16),
    ("mamba2_chunk_state", {**_MAMBA2, "ngroups": 8, "batch": 1, "seqlen": 16384,
                            "dtype": "bfloat16"}, 20, 17),
)


def source_sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _spec_and_runtime(op: str, params: dict[str, Any]) -> tuple[Any, tuple[str, ...]]:
    from scheduler_search.ops import parse_spec

    params = dict(params)
    runtime = ("m",) if params.pop("runtime_m", False) else ()
    return parse_spec(op, params), runtime


def render_entry(entry: dict[str, Any]) -> str:
    """The kernel text of one stored entry, planned again from its choices."""
    from codegen import render
    from scheduler_search.hardware import get_device
    from scheduler_search.sprogram import plan_sprogram

    device = get_device(DEVICE_NAME)
    spec, _ = _spec_and_runtime(entry["op"], entry["params"])
    sprogram = plan_sprogram(spec, device, entry["choices"])
    if entry["runtime_dims"]:
        sprogram = replace(sprogram, runtime_dims=tuple(entry["runtime_dims"]))
    return render(sprogram, spec, device).source


def build() -> list[dict[str, Any]]:
    """Draw the sample and hash every schedule's text: one entry a schedule."""
    sys.path.insert(0, str(ROOT / "tests"))
    from schedule_samples import sample_schedules

    from codegen import unsupported
    from scheduler_search.hardware import get_device

    device = get_device(DEVICE_NAME)
    entries = []
    for op, params, count, seed in SAMPLE:
        spec, runtime = _spec_and_runtime(op, params)
        for sprogram in sample_schedules(spec, device, count, seed=seed):
            dims: tuple[str, ...] = ()
            if runtime and unsupported(replace(sprogram, runtime_dims=runtime), device) is None:
                dims = runtime
            entry = {"op": op, "params": params, "choices": sprogram.choices,
                     "runtime_dims": list(dims)}
            entry["sha256"] = source_sha(render_entry(entry))
            entries.append(entry)
    return entries


def load() -> list[dict[str, Any]]:
    """The stored entries, one a schedule (the file groups them by workload)."""
    return [{"op": case["op"], "params": case["params"], **schedule}
            for case in json.loads(SNAPSHOT.read_text())
            for schedule in case["schedules"]]


def _write(entries: list[dict[str, Any]]) -> None:
    """The entries grouped by workload, a line a schedule (diffs stay readable)."""
    cases: dict[str, dict[str, Any]] = {}
    for e in entries:
        key = json.dumps([e["op"], e["params"]], sort_keys=True)
        cases.setdefault(key, {"op": e["op"], "params": e["params"], "schedules": []})
        cases[key]["schedules"].append({k: e[k] for k in ("choices", "runtime_dims", "sha256")})
    compact = {"sort_keys": True, "separators": (",", ":")}
    blocks = []
    for case in cases.values():
        rows = ",\n".join(json.dumps(s, **compact) for s in case["schedules"])
        head = json.dumps({"op": case["op"], "params": case["params"]}, **compact)[:-1]
        blocks.append(f'{head},"schedules":[\n{rows}\n]}}')
    SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
    SNAPSHOT.write_text("[\n" + ",\n".join(blocks) + "\n]\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="write the snapshot")
    args = parser.parse_args(argv)
    entries = build()
    if args.update:
        _write(entries)
        print(f"{len(entries)} schedules written to {SNAPSHOT.relative_to(ROOT)}")
    else:
        print(f"{len(entries)} schedules drawn (--update writes them)")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
