"""bench/decode_timeline.py's block clock (CPU): added to a stream-K decode kernel's source,
it stamps the block's start, its first stream-K part and its exit, compiles clean for
sm_90a, and its rows and summary read the stamps back as the probe reports them."""

from __future__ import annotations

import pytest

from bench.decode_timeline import SLOTS, UNSET, block_rows, clocked_source, summary
from codegen import render
from codegen.nvcc import compile_report, nvcc_path
from scheduler_search.hardware import get_device
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.space.designs import GEMM_DECODE_SWAP
from scheduler_search.sprogram import plan_sprogram

H200 = get_device("h200")


def _stream_k_artifact():
    spec = GemmSpec(m=8, n=1280, k=8192, dtype="bfloat16", b_layout="nk")
    return render(plan_sprogram(spec, H200, {**GEMM_DECODE_SWAP, "stream_k": 1}), spec, H200)


def test_the_clock_stamps_start_part_and_exit_and_compiles_clean() -> None:
    artifact = _stream_k_artifact()
    source = clocked_source(artifact.source, artifact.entry)
    assert source.count("PtBlockClock pt_block_clock;") == 1
    assert source.count("pt_mark(1);") == 1  # at the stream-K part
    clock = source.index("PtBlockClock pt_block_clock;")  # the body's first statement
    assert source.index(f"{artifact.entry}(") < clock < source.index("extern __shared__")
    if nvcc_path() is None:
        pytest.skip("no nvcc on this machine")
    report = compile_report(source)
    assert report.ok and not report.spills and not report.stack_bytes, report.log[-400:]


def test_a_source_without_the_kernel_is_refused() -> None:
    with pytest.raises(ValueError, match="no kernel"):
        clocked_source(_stream_k_artifact().source, "not_a_kernel")


def test_rows_and_summary_read_the_stamps() -> None:
    def block(start: int, part: int, end: int, sm: int) -> list[int]:
        cycles = [(t - start) * 2 if t != UNSET else UNSET for t in (start, part, end)]
        return [start, part, end, *cycles, sm]

    values = block(1000, 1500, 3000, 7) + block(1100, UNSET, 2000, 9)
    assert len(values) == 2 * len(SLOTS)
    rows = block_rows(values, 2)
    assert rows[0] == {"sm": 7, "start_ns": 0, "part_ns": 500, "end_ns": 2000,
                       "part_cycles": 1000, "cycles": 4000}
    assert rows[1]["part_ns"] is None and rows[1]["end_ns"] == 1000
    report = summary(rows)
    assert report["span_ns"] == 2000 and report["end_ns_min"] == 1000
    assert report["sm_idle_fraction"] == pytest.approx(1000 / 4000)
    assert report["part_at_fraction_median"] == pytest.approx(0.25)
