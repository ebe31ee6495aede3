"""A matrix product as an operator describes it to a target: where each operand lives,
the product's shape and the accumulators it adds into; the target writes the loop of
instructions that computes it (:func:`codegen.targets.hopper.write_mma`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class MmaPart:
    """One accumulator's share of a product (a packed head's columns, or the whole tile).

    Args:
        accumulator: the accumulator fragment of row block ``mi``, a C++ lvalue.
        b_address: shared-memory address of B's slice at k step ``kk`` (C++ expression).
        a_address: shared-memory address of A's slice at k step ``kk`` and row block
            ``mi``; None where A is in registers.
        a_registers: A's registers at k step ``kk`` of row block ``mi``, a template with
            ``{i}`` for each of the step's four 16-bit pairs; None where A is in shared
            memory.
    """

    accumulator: str
    b_address: str
    a_address: str | None = None
    a_registers: str | None = None


@dataclass(frozen=True)
class Mma:
    """``acc[CONSUMER_ROWS x n] (+)= A B`` over ``k_steps`` steps, per 64-row block ``mi``.

    Args:
        n: the product's columns (B's rows, or columns MN-major).
        dtype: the operands' element type.
        b_major: B's majorness in shared memory (``k`` or ``mn``).
        a_major: A's majorness, where A is in shared memory.
        k_steps: the loop's step count (a C++ expression).
        b_layout, a_layout: the operands' descriptor layout constants.
        accumulate: whether a step adds to the accumulators (C++ condition).
        parts: the accumulators and operand addresses (one, or one per packed head).
        pin: writes the accumulators' pins before the product is issued.
        bases: declarations the addresses read, written before the loop.
        tail_break: a condition after which the loop's remaining steps are past K.
        row_blocks: the product's 64-row blocks ``mi`` (C++; default the consumer's rows,
            another M where the product's rows are not the output tile's).
    """

    n: int
    dtype: str
    b_major: Literal["k", "mn"]
    k_steps: str
    b_layout: str
    accumulate: str
    parts: tuple[MmaPart, ...]
    pin: Callable[[], None]
    bases: tuple[str, ...] = ()
    a_major: Literal["k", "mn"] = "k"
    a_layout: str | None = None
    tail_break: str | None = None
    row_blocks: str = "ROW_BLOCKS"

    @property
    def a_in_registers(self) -> bool:
        return self.parts[0].a_registers is not None
