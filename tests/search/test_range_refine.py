"""A range run's refining rounds: at a gap's middle they measure the candidates in the
running at either end, and those the cost model, scaled from each one's nearest
measurement, puts near the best there (a tile that fills a wave only between two sampled
sizes, slow at both)."""

from __future__ import annotations

from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_range_spec
from scheduler_search.search.range_refine import PREDICTED_CONTENDERS
from scheduler_search.search.range_search import RangeCandidate, RangeSearch
from scheduler_search.search.records import TrialRecord
from scheduler_search.space.designs import DESIGNS
from scheduler_search.sprogram import plan_sprogram

DEVICE = get_device("sim:h200")
RANGE = parse_range_spec("gemm", {"m": {"min": 1, "max": 4096}, "n": 3200, "k": 4608,
                                  "dtype": "bfloat16", "b_layout": "nk"})
#: Measured (us) at m = 200 and 900, and the cost model's predictions at 200, 424 (the
#: gap's geometric middle), 900: "sweet" fills one wave at 424 only; "steady" wins both
#: ends; "slow" never wins.
MEASURED = {"steady": (10.0, 30.0), "sweet": (14.0, 45.0), "slow": (20.0, 60.0)}
PREDICTED = {"steady": (10.0, 20.0, 30.0), "sweet": (14.0, 14.0, 45.0),
             "slow": (20.0, 40.0, 60.0)}
SIZES = (200, 900)


def _search() -> tuple[RangeSearch, dict[str, RangeCandidate]]:
    search = RangeSearch(RANGE, DEVICE, executor=None, make_jobs=lambda *a: [])
    spec = RANGE.exact(RANGE.at(4096))
    design = next(iter(DESIGNS["gemm"].values()))
    candidates = {}
    for index, (name, tile_n) in enumerate((("steady", 128), ("sweet", 192), ("slow", 256))):
        sprogram = plan_sprogram(spec, DEVICE, {**design, "tile_n": tile_n})
        candidates[name] = RangeCandidate(index, sprogram, "design")
        for size, us in zip(SIZES, MEASURED[name], strict=True):
            search._known[(sprogram.hash, size)] = TrialRecord(
                number=len(search._known), choices={"m": size}, status="ok",
                schedule_hash=sprogram.hash, latency_us=us)
        for size, us in zip((200, 424, 900), PREDICTED[name], strict=True):
            search._predicted[(sprogram.hash, size)] = us
    return search, candidates


def test_a_candidate_slow_at_both_ends_but_predicted_best_between_is_measured_there() -> None:
    search, by_name = _search()
    candidates = list(by_name.values())
    # Scaled from 900 (the nearer): sweet 45 x 14 / 45 = 14, steady 30 x 20 / 30 = 20
    # (over 1.25 x 14), slow 40.
    predicted = search.refiner.predicted_contenders(candidates, 424)
    assert [c.index for c in predicted] == [by_name["sweet"].index]
    assert len(predicted) <= PREDICTED_CONTENDERS
    [(middle, contenders)] = search.refiner.gaps(candidates, list(SIZES))
    assert middle == 424
    # steady leads both ends; sweet joins on its prediction; slow is in no one's running.
    assert {c.index for c in contenders} == {by_name["steady"].index, by_name["sweet"].index}
