"""bench/dynamic.py's drawn (n, k) pairs: reproducible from the logged seed, distinct, and
never a power of two or a dimension development tuned for (the GEMM suite's)."""

from __future__ import annotations

import pytest

from bench.dynamic import PAIR_RANGE, PAIR_STEP, draw_pairs, main
from scheduler_search.ops.suites import GEMM_SHAPES


def test_pairs_are_reproducible_distinct_and_unseen() -> None:
    pairs = draw_pairs(12, seed=44)
    assert pairs == draw_pairs(12, seed=44) and pairs != draw_pairs(12, seed=45)
    assert len(set(pairs)) == 12
    suite = {dim for shape in GEMM_SHAPES for dim in shape}
    low, high = PAIR_RANGE
    for n, k in pairs:
        for value in (n, k):
            assert low <= value <= high and value % PAIR_STEP == 0
            assert value & (value - 1)  # not a power of two
            assert value not in suite


def test_the_command_line_takes_pairs_and_layouts(monkeypatch, tmp_path) -> None:
    """Each drawn pair in each layout is one range workload per dtype, in a folder of its
    own; the results log the seed and the pairs (the GPU work is stood in for)."""
    import bench.dynamic as dynamic

    seen = []

    def fake_run(dtype, args, folder):
        seen.append((args.n, args.k, args.layout, dtype, folder.name))
        params = dynamic.workload(args, dtype).fixed
        return {"dtype": dtype, "params": params, "range_run": {"wall_s": 1.0, "buckets": []},
                "exact_run": {"wall_s": 1.0}, "range_over_exact_wall": 1.0,
                "sizes": [{f"{f}_ratio": 1.0 + 0.1 * len(seen) for f in dynamic.FIGURES}],
                **{f"{f}_{s}": 1.0 for f in dynamic.FIGURES for s in ("geomean", "min")}}

    monkeypatch.setattr(dynamic, "run_dtype", fake_run)
    monkeypatch.setattr(dynamic, "warm_up", lambda *a: 0.0)
    out = tmp_path / "dynamic.json"
    assert main(["--draw-pairs", "2", "--layouts", "nk", "kn", "--dtypes", "bfloat16",
                 "--out", str(out)]) == 0
    pairs = draw_pairs(2, seed=44)
    assert [(n, k, layout) for n, k, layout, _, _ in seen] == [
        (n, k, layout) for n, k in pairs for layout in ("nk", "kn")]
    assert len({folder for *_, folder in seen}) == 4
    import json

    doc = json.loads(out.read_text())
    assert doc["pairs"] == {"seed": 44, "drawn": [list(p) for p in pairs],
                            "run": [list(p) for p in pairs], "layouts": ["nk", "kn"]}
    assert doc["overall"]["graph_geomean"] > 1.0


def test_a_run_cut_at_its_cap_keeps_the_cases_it_measured(monkeypatch, tmp_path) -> None:
    """The results file is written after every case: a run killed during its second case
    (a device call's time cap) leaves the first, marked incomplete."""
    import json

    import bench.dynamic as dynamic

    out = tmp_path / "dynamic.json"
    calls = []

    def fake_run(dtype, args, folder):
        calls.append(args.n)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the cap's kill, during the second case
        return {"dtype": dtype, "params": {"n": args.n, "k": args.k},
                "sizes": [{f"{f}_ratio": 0.9 for f in dynamic.FIGURES}]}

    monkeypatch.setattr(dynamic, "run_dtype", fake_run)
    monkeypatch.setattr(dynamic, "warm_up", lambda *a: 0.0)
    with pytest.raises(KeyboardInterrupt):
        main(["--draw-pairs", "2", "--layouts", "nk", "--dtypes", "bfloat16",
              "--out", str(out)])
    doc = json.loads(out.read_text())
    assert doc["complete"] is False
    assert [c["params"]["n"] for c in doc["cases"]] == [draw_pairs(2, seed=44)[0][0]]
    assert abs(doc["overall"]["graph_geomean"] - 0.9) < 1e-9


def test_a_run_may_take_some_of_the_drawn_pairs(monkeypatch, tmp_path) -> None:
    """``--pair-indices`` runs the chosen pairs of the draw (one device call each); the
    file names the whole draw and the pairs it ran."""
    import json

    import bench.dynamic as dynamic

    seen = []

    def fake_run(dtype, args, folder):
        seen.append((args.n, args.k))
        return {"dtype": dtype, "params": {}, "range_run": {"wall_s": 1.0, "buckets": []},
                "exact_run": {"wall_s": 1.0}, "range_over_exact_wall": 1.0,
                "sizes": [{f"{f}_ratio": 1.0 for f in dynamic.FIGURES}],
                **{f"{f}_{s}": 1.0 for f in dynamic.FIGURES for s in ("geomean", "min")}}

    monkeypatch.setattr(dynamic, "run_dtype", fake_run)
    monkeypatch.setattr(dynamic, "warm_up", lambda *a: 0.0)
    out = tmp_path / "dynamic.json"
    assert main(["--draw-pairs", "3", "--pair-indices", "2", "--dtypes", "bfloat16",
                 "--out", str(out)]) == 0
    drawn = draw_pairs(3, seed=44)
    assert seen == [drawn[2]]
    doc = json.loads(out.read_text())
    assert doc["pairs"]["drawn"] == [list(p) for p in drawn]
    assert doc["pairs"]["run"] == [list(drawn[2])] and doc["complete"] is True
