"""Code generation's targets: what one GPU architecture needs of the text and its build.

The sProgram says what runs on which sEU in which order; a target says how, on one
architecture: the compile options (NVRTC's and nvcc's, an exported kernel's build line)
and the instructions of the matrix products, their waits, a stage's arming, the register
budgets and the accumulator fragment's layout. A kernel's target is its sProgram's
architecture (:func:`target_for`); Hopper is the one target today.
"""

from codegen.targets.hopper import HOPPER, HopperTarget
from codegen.targets.mma import Mma, MmaPart
from codegen.targets.target import Target

#: Architecture -> its target.
TARGETS: dict[str, Target] = {HOPPER.arch: HOPPER}


def target_for(arch: str) -> Target:
    """The target of architecture ``arch``.

    Raises:
        ValueError: no target generates code for ``arch``.
    """
    if arch not in TARGETS:
        raise ValueError(f"no code generation target for {arch} (targets: "
                         f"{', '.join(sorted(TARGETS))})")
    return TARGETS[arch]


__all__ = ["HOPPER", "TARGETS", "HopperTarget", "Mma", "MmaPart", "Target", "target_for"]
