"""``pipetune tune`` follows its run to the end, also when the run was queued again."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from service.runs.in_process import _follow


class _RequeuedOnce:
    """A run manager whose run failed on the database in its first start and was queued
    again to start after a wait (no other process serves this database): the first
    execution returns it queued, the next one (once claimable) ends it."""

    def __init__(self) -> None:
        self.executions = 0
        self.reads = 0

    def run_inline(self, run_id: int, on_progress: object) -> SimpleNamespace:
        self.executions += 1
        status = "queued" if self.executions == 1 else "succeeded"
        return SimpleNamespace(id=run_id, status=status, trials_done=4 * self.executions)

    def recover(self) -> list[int]:
        return []  # a queued run is nobody's to recover

    def get(self, run_id: int) -> SimpleNamespace:
        self.reads += 1
        if self.reads > 5:
            pytest.fail("the run stays queued: nobody claims it again")
        return SimpleNamespace(id=run_id, status="queued", trials_done=4)


def test_a_run_queued_again_after_a_fault_is_claimed_again_and_followed_to_its_end() -> None:
    manager = _RequeuedOnce()
    run = _follow(manager, 7, trials=8, progress=False)  # type: ignore[arg-type]
    assert (run.status, manager.executions) == ("succeeded", 2)
