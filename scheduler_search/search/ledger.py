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
        self.tied_rounds = 0  # rounds in a row that measured only known latencies
        self._latencies: set[float] = set()

    @property
    def trials_committed(self) -> int:
        """Measured and in flight: what the trial budget has given out."""
        return self.trials_done + len(self.inflight)

    def remember(self, record: TrialRecord) -> None:
        """Count a measured record against the budget and track the best (an invalid one,
        stored by an older run, only counts). Of equal latencies the first measured stays
        best: ties are broken by measurement order, the same on every run of a seed."""
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

    def note_round(self, records: list[TrialRecord]) -> None:
        """Count the round towards ``tied_rounds`` if every latency it measured ties one
        measured before (to a part in a billion): a deterministic device, such as the
        simulated one, cannot tell those schedules apart."""
        latencies = [_tie_key(r.latency_us) for r in records if r.ok]
        known = bool(latencies) and all(value in self._latencies for value in latencies)
        self.tied_rounds = self.tied_rounds + 1 if known else 0
        self._latencies.update(latencies)

    def fastest(self) -> list[TrialRecord]:
        """The successful measured records, fastest first; ties in measurement order."""
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


def _tie_key(latency_us: float | None) -> float:
    """A latency rounded to 9 significant digits: equal keys are ties."""
    return float(f"{latency_us or 0.0:.9g}")
