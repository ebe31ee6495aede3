"""Stream-K's share of work: which block runs which reduction trips of the last tiles.

A persistent grid of ``blocks`` blocks runs ``tiles`` output tiles of ``trips`` loop
trips each. Whole tiles strided over the blocks leave the last wave part-empty when the
tiles are not a multiple of the blocks (512 tiles on 132 SMs: a last wave of 116). With
stream-K, only the first ``dp_tiles`` are given out whole; the trips of the remaining
``sk_tiles`` (the partial wave and ``waves - 1`` whole ones before it) are cut into
``blocks`` consecutive ranges of equal length (one trip apart at most), one a block.

A tile whose trips fall to several blocks is a *split* tile: each block keeps its part's
sums in a workspace slot, and the block that finishes its part last adds the parts in
block order (the same order whatever the timing: a deterministic result) and stores it.
A block's range touches at most two split tiles (its first and its last: the tiles
between lie wholly in it), hence two slots a block.

The kernel text (``codegen.pipeline``) does the same arithmetic in C++; the space, the
cost model and the tests read it here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StreamKShare:
    """Stream-K over ``blocks`` persistent blocks for ``waves`` waves of the tiles."""

    tiles: int
    trips: int
    blocks: int
    waves: int

    @property
    def sk_tiles(self) -> int:
        """The last tiles of the order, shared out by trips."""
        partial = self.tiles % self.blocks
        return min(self.tiles, partial + (self.waves - 1) * self.blocks) if partial else 0

    @property
    def dp_tiles(self) -> int:
        """The first tiles, given out whole."""
        return self.tiles - self.sk_tiles

    @property
    def sk_trips(self) -> int:
        return self.sk_tiles * self.trips

    def problem(self) -> str | None:
        """Why this share would not help or cannot be lowered, or None."""
        if self.waves < 1:
            return f"stream_k={self.waves}: waves are >= 1"
        if self.tiles % self.blocks == 0:
            return f"{self.tiles} tiles fill whole waves of {self.blocks} blocks"
        if self.tiles < self.blocks * (self.waves - 1):
            return f"{self.tiles} tiles are fewer than {self.waves} waves of {self.blocks}"
        if self.sk_trips < self.blocks:
            # A block without trips would leave a gap in a split tile's contributors.
            return f"{self.sk_trips} stream-K trips give some of {self.blocks} blocks none"
        return None

    def begin(self, block: int) -> int:
        """The first stream-K trip of ``block`` (``begin(blocks)`` is the end)."""
        return block * self.sk_trips // self.blocks

    def block_of(self, trip: int) -> int:
        """The block whose range holds stream-K trip ``trip``."""
        return ((trip + 1) * self.blocks - 1) // self.sk_trips

    def contributors(self, sk_tile: int) -> range:
        """The blocks that run trips of stream-K tile ``sk_tile`` (0 = the first)."""
        first = self.block_of(sk_tile * self.trips)
        return range(first, self.block_of((sk_tile + 1) * self.trips - 1) + 1)

    def slot(self, block: int, sk_tile: int) -> int:
        """Which of ``block``'s two workspace slots holds its part of ``sk_tile``."""
        return 0 if self.begin(block) // self.trips == sk_tile else 1

    def segments(self, block: int) -> list[tuple[int, int, int]]:
        """``block``'s stream-K work: (stream-K tile, first trip, trips) in order."""
        out, q, end = [], self.begin(block), self.begin(block + 1)
        while q < end:
            tile, first = divmod(q, self.trips)
            count = min(self.trips - first, end - q)
            out.append((tile, first, count))
            q += count
        return out


__all__ = ["StreamKShare"]
