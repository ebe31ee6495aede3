"""Code generation keeps its text: 540 schedules sampled across the four operators
(``text_snapshot.SAMPLE``) render today exactly the CUDA they rendered when the snapshot
was written, so a refactor cannot change a kernel that a GPU figure was measured on. A
change that means to alter kernels bumps its operator's hooks version and writes the
snapshot again (``python tests/codegen/text_snapshot.py --update``)."""

from __future__ import annotations

from text_snapshot import load, render_entry, source_sha

OPERATORS = {"gemm", "attention", "mamba2_chunk_scan", "mamba2_chunk_state"}


def test_the_snapshot_spans_every_operator_and_run_time_sizes() -> None:
    entries = load()
    assert len(entries) >= 500
    assert {e["op"] for e in entries} == OPERATORS
    assert any(e["runtime_dims"] for e in entries)
    assert any(e["choices"].get("swap_ab") for e in entries)


def test_every_sampled_schedule_renders_the_text_it_did() -> None:
    changed = [e for e in load() if source_sha(render_entry(e)) != e["sha256"]]
    first = [(e["op"], e["params"], e["choices"]) for e in changed[:2]]
    assert not changed, (
        f"{len(changed)} schedules render other CUDA than the snapshot's, e.g. {first}; "
        "if that is meant, bump the operator's hooks version and run "
        "python tests/codegen/text_snapshot.py --update")
