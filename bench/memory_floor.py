"""The memory floor of the Mamba2 chunk state, and the speedup over the peer it allows.

The chunk state is memory-bound (``docs/mamba2.md``): its compulsory traffic (x, B, dt and
dA read once, the states written once, in fp32 or, with ``states_in_fp32=False``, in the
inputs' dtype) over the device's copy bandwidth is the fastest any kernel can run. This
script measures that floor with the workers' own timing method (the L2 flushed before each
launch, the host lead, CUDA events, median): a device-to-device copy that reads and writes
half of the case's compulsory bytes each, and, in the same process, ``mamba_ssm``'s Triton
``_chunk_state_fwd`` on the case's inputs. ``peer_us / floor_us`` is the largest speedup a
kernel could show on the case; their geometric mean over the suite bounds the suite's figure
in ``bench/mamba2.py``; one per states format.

    PYTHONPATH=.:.peers python3 bench/memory_floor.py --out bench/results/memory_floor-DATE.json
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import dated_result, geomean, timing_configs, tree_state, write_json  # noqa: E402

OP = "mamba2_chunk_state"
PEER = "mamba_ssm_chunk_state"


#: Case-name prefix -> ``states_in_fp32`` (as bench/mamba2.py's variants).
STATES = {"state": True, "state16": False}


def cases() -> list[dict[str, Any]]:
    """The suite's chunk-state cases, in both states formats, with their compulsory bytes."""
    from scheduler_search.ops import parse_spec
    from scheduler_search.ops.suites import mamba2_suite

    found = []
    for variant, in_fp32 in STATES.items():
        for base in mamba2_suite():
            p = {**base, "states_in_fp32": in_fp32}
            found.append({"case": f"{variant}-{p['batch']}x{p['seqlen']}", "variant": variant,
                          "params": p, "min_bytes": parse_spec(OP, p).min_bytes()})
    return found


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per case the copy bandwidth and the ceiling ``peer_us / floor_us``; their geomean
    per states format."""
    for row in rows:
        row["copy_tbps"] = row["min_bytes"] / row["floor_us"] / 1e6
        if row.get("peer_us"):
            row["ceiling_ratio"] = row["peer_us"] / row["floor_us"]
    ceilings = {v: [r["ceiling_ratio"] for r in rows if r["variant"] == v and "ceiling_ratio" in r]
                for v in STATES}
    return {"cases": rows, "ceiling_geomean": {v: geomean(c) for v, c in ceilings.items() if c},
            "ceiling_cases": {v: len(c) for v, c in ceilings.items()}}


def _median_us(launch: Any, timing: Any, flush: Any) -> float:
    from workers.timing import time_launches

    return statistics.median(time_launches(launch, timing, flush))


def _copy_floor_us(min_bytes: int, timing: Any, flush: Any) -> float:
    """A device-to-device copy of ``min_bytes / 2``: as many bytes read plus written."""
    import cupy

    half = min_bytes // 2
    src = cupy.full(half, 7, dtype=cupy.uint8)  # a copy's speed does not depend on values
    dst = cupy.empty_like(src)
    return _median_us(lambda: dst.data.copy_from_device_async(src.data, half), timing, flush)


def _peer_us(params: dict[str, Any], timing: Any, flush: Any) -> float | None:
    """mamba_ssm's Triton chunk state on seeded inputs, or None where it cannot run."""
    import cupy

    from workers.baselines import BaselineUnavailable, prepare_baseline
    from workers.contract import contract
    from workers.inputs import build_inputs

    tensors_spec = contract(OP, params)
    dtypes = {name: t.dtype for name, t in tensors_spec.items()}
    tensors = build_inputs(cupy, OP, params, dtypes, seed=0)
    states = tensors_spec["states"]
    tensors["states"] = cupy.empty(states.shape, dtype=cupy.float32 if params[
        "states_in_fp32"] else cupy.float16)  # the peer writes its own; a same-sized stand-in
    try:
        launch, _ = prepare_baseline(PEER, OP, params, tensors, dtypes)
    except BaselineUnavailable as exc:
        print(f"peer unavailable: {exc}", flush=True)
        return None
    return _median_us(launch, timing, flush)


def run(args: argparse.Namespace) -> None:
    import cupy

    from workers.device import read_fingerprint
    from workers.timing import L2Flusher

    _, final = timing_configs()
    flush = L2Flusher(cupy.cuda.Device().attributes["L2CacheSize"])
    rows = []
    for case in cases():
        p = case["params"]
        row = {**case,
               "floor_us": _copy_floor_us(case["min_bytes"], final, flush),
               "peer_us": _peer_us(p, final, flush)}
        rows.append(row)
        print(f"{row['case']:<16} {case['min_bytes'] / 1e6:8.1f} MB  floor "
              f"{row['floor_us']:8.1f} us  peer {row['peer_us'] or float('nan'):8.1f} us",
              flush=True)
    summary = summarise(rows)
    doc = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
           "suite": "mamba2 chunk state memory floor", "peer": PEER,
           "fingerprint": read_fingerprint(0), **tree_state(),
           "method": "device-to-device copy of half the compulsory bytes (read + write), "
                     "the workers' final timing with the L2 flushed before each launch",
           "timing": final.to_dict(), **summary}
    write_json(args.out, doc)
    for variant, ceiling in summary["ceiling_geomean"].items():
        print(f"{variant}: ceiling over the suite (peer / floor, geomean of "
              f"{summary['ceiling_cases'][variant]}): {ceiling:.3f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=dated_result("memory_floor"))
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
