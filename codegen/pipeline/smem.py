"""The shared-memory plan: named regions at aligned offsets from the kernel's aligned base.

Regions are laid out in the order they are added; a region may alias an earlier one (a
TMA store's staging buffer reusing idle operand stages). The kernel text names each
offset ``SMEM_<NAME>`` and re-checks the total against the device with a static_assert.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Dynamic shared memory is rounded up to this boundary inside the kernel (128B swizzle
#: atoms are 1024 B); the launch asks for this much more than the layout.
SMEM_ALIGN = 1024
#: Bytes the barrier block is aligned to at the end of the plan.
BARRIER_ALIGN = 8


def align(value: int, to: int) -> int:
    return -(-value // to) * to


@dataclass
class SmemPlan:
    """Offsets of named regions, in bytes from the 1024-byte aligned base."""

    offsets: dict[str, int] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    end: int = 0

    def add(self, name: str, size_bytes: int, alignment: int = SMEM_ALIGN) -> int:
        """A region of ``size_bytes`` after the previous ones; its size is padded to
        ``alignment`` so the next region starts aligned."""
        if name in self.offsets:
            raise ValueError(f"shared-memory region {name} added twice")
        self.offsets[name] = self.end
        self.sizes[name] = size_bytes
        self.end += align(size_bytes, alignment)
        return self.offsets[name]

    def alias(self, name: str, of: str) -> int:
        """A region that reuses ``of``'s bytes (it must fit there)."""
        self.offsets[name] = self.offsets[of]
        self.sizes[name] = 0
        return self.offsets[name]

    @property
    def total_bytes(self) -> int:
        """Bytes from the aligned base to the end of the last region."""
        return align(self.end, 16)

    @property
    def dynamic_bytes(self) -> int:
        """What the launch asks for: the plan plus the alignment slack of the base."""
        return self.total_bytes + SMEM_ALIGN

    def layout(self) -> dict[str, int]:
        """Every offset and the total (``BYTES``), for the artifact and the tests."""
        return {**self.offsets, "BYTES": self.total_bytes}
