"""The records so far of one search: what was measured, what is in flight, the best."""

from __future__ import annotations

from scheduler_search.search.proposals import Proposal
from scheduler_search.search.records import INVALID, TrialRecord
from scheduler_search.sprogram import SProgram


class Ledger:
    """Every measured schedule by hash (never measured twice), the counts the budget
    reads, the best record and the best-so-far curve.

    Records of an earlier attempt of the same run (``history``) are entered first: they
    count against the budget and are never measured again.
    """

    def __init__(self) -> None:
        self.measured: dict[str, TrialRecord] = {}
        self.programs: dict[str, SProgram] = {}  # measured hash -> sProgram (re-timing)
        self.inflight: dict[str, Proposal] = {}  # hash -> proposal being measured
        self.trials_done = 0
        self.invalid = 0
        self.since_improvement = 0
        self.best: TrialRecord | None = None
        self.curve: list[tuple[float, float]] = []

    @property
    def trials_committed(self) -> int:
        """Measured and in flight: what the trial budget has given out."""
        return self.trials_done + len(self.inflight)

    def remember(self, record: TrialRecord) -> None:
        """Count a measured record against the budget and track the best (an invalid one
        only counts: new invalid points are counted as the sampler finds them)."""
        if record.status == INVALID:
            self.invalid += 1
            return
        if record.schedule_hash is None or record.schedule_hash in self.measured:
            return
        self.measured[record.schedule_hash] = record
        self.trials_done += 1
        if record.ok and (
            self.best is None
            or record.latency_us < self.best.latency_us  # type: ignore[operator]
        ):
            self.best = record
            self.since_improvement = 0
            self.curve.append((record.elapsed_s or 0.0, float(record.latency_us)))  # type: ignore[arg-type]
        else:
            self.since_improvement += 1

    def fastest(self) -> list[TrialRecord]:
        """The successful measured records, fastest first."""
        return sorted((r for r in self.measured.values() if r.ok),
                      key=lambda r: r.latency_us or 0.0)

    def program(self, record: TrialRecord) -> SProgram | None:
        """The sProgram of a measured record (rebuilt from its dict for history)."""
        digest = record.schedule_hash
        if digest is None:
            return None
        if digest not in self.programs and record.schedule is not None:
            try:
                self.programs[digest] = SProgram.from_dict(record.schedule)
            except (KeyError, TypeError, ValueError):
                return None
        return self.programs.get(digest)
