"""How long one sTask instance takes on one sEU: analytic, or replaced by measurements.

The cost model asks a :class:`TimingModel` for every sTask instance it simulates. The
analytic model divides the instance's work by the sEU's rate and adds the sEU's latency;
a :class:`MeasuredTimings` table (filled from GPU measurements, per device) overrides
it sTask by sTask and can scale whole sEUs, so calibration needs no change elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from scheduler_search.hardware.model import SEU, UnitKind
from scheduler_search.ir import STask, STaskKind

#: wgmma efficiency falls for narrow N: the A operand is re-read per instruction
#: (estimate: 1 - 8/N, i.e. 97% at N=256, 87.5% at N=64).
WGMMA_NARROW_N_PENALTY = 8.0


@dataclass(frozen=True)
class Work:
    """The work of one sTask instance: ``amount`` in the sEU's rate unit (bytes, flops
    or lane operations) and, for MMAs, the N extent of the instruction and the operand
    bytes its warps read from shared memory where each warp reads its own (``mma.sync``:
    its rows of A, all of B)."""

    amount: float
    mma_n: int = 0
    warp_operand_bytes: float = 0.0


class TimingModel(Protocol):
    """Cycles one sTask instance occupies its sEU (latency excluded) and its latency.

    ``cache_key`` identifies the timings for the cost model's cache of block simulations:
    two models with equal keys must give equal cycles; ``None`` means "do not cache".
    """

    def busy_cycles(self, stask: STask, unit: SEU, work: Work) -> float: ...

    def latency_cycles(self, stask: STask, unit: SEU) -> float: ...

    def cache_key(self) -> tuple | None: ...


class AnalyticTimings:
    """Rates and latencies of the hardware model (datasheet figures and estimates)."""

    def busy_cycles(self, stask: STask, unit: SEU, work: Work) -> float:
        rate = unit.rate_per_cycle
        amount = work.amount
        if unit.kind is not stask.units[0]:
            amount *= stask.emulation_ops
        if stask.kind is STaskKind.MMA and unit.kind is UnitKind.TENSOR_CORE and work.mma_n:
            if unit.operand_bytes_per_cycle:  # warps read their own operands: may bound it
                return max(amount / rate, work.warp_operand_bytes / unit.operand_bytes_per_cycle)
            rate *= max(0.25, 1.0 - WGMMA_NARROW_N_PENALTY / work.mma_n)
        return amount / rate

    def latency_cycles(self, stask: STask, unit: SEU) -> float:
        return unit.latency_cycles

    def cache_key(self) -> tuple | None:
        return ()  # the hardware model's figures: part of the device's fingerprint


@dataclass
class MeasuredTimings:
    """Measured per-sTask times that replace the analytic ones.

    Args:
        busy_cycles_by_stask: cycles per instance, by sTask name, for the tile shape the
            measurement was made with (exact replacement).
        unit_scale: multiplies the analytic busy time of every sTask on an sEU kind
            (calibration of a rate from measurements).
        latency_by_unit: replaces an sEU's latency.
        fallback: the model used for whatever the table does not cover.
    """

    busy_cycles_by_stask: dict[str, float] = field(default_factory=dict)
    unit_scale: dict[UnitKind, float] = field(default_factory=dict)
    latency_by_unit: dict[UnitKind, float] = field(default_factory=dict)
    fallback: TimingModel = field(default_factory=AnalyticTimings)

    def busy_cycles(self, stask: STask, unit: SEU, work: Work) -> float:
        if stask.name in self.busy_cycles_by_stask:
            return self.busy_cycles_by_stask[stask.name]
        return self.fallback.busy_cycles(stask, unit, work) * self.unit_scale.get(unit.kind, 1.0)

    def latency_cycles(self, stask: STask, unit: SEU) -> float:
        if unit.kind in self.latency_by_unit:
            return self.latency_by_unit[unit.kind]
        return self.fallback.latency_cycles(stask, unit)

    def cache_key(self) -> tuple | None:
        """What identifies these timings for the cost model's simulation cache (None:
        not cacheable, the fallback is not the analytic model)."""
        if type(self.fallback) is not AnalyticTimings:
            return None
        return (
            tuple(sorted(self.busy_cycles_by_stask.items())),
            tuple(sorted((str(k), v) for k, v in self.unit_scale.items())),
            tuple(sorted((str(k), v) for k, v in self.latency_by_unit.items())),
        )
