"""Code generation's targets: what one GPU architecture needs of the text and its build.

The sProgram says what runs on which sEU in which order; a target says how, on one
architecture: the compile options (NVRTC's and nvcc's, an exported kernel's build line)
and the instructions of the matrix products, their waits, a stage's arming, the register
budgets and the accumulator fragment's layout. A kernel's target is its sProgram's
architecture (:func:`target_for`): Hopper's, and the Ampere class's (sm_80,
sm_86, sm_89), which write the same sPrograms with cp.async and mma.sync.
"""

from codegen.targets.ampere import ADA, AMPERE, AMPERE_SM86, AmpereTarget
from codegen.targets.hopper import HOPPER, HopperTarget
from codegen.targets.mma import Mma, MmaPart
from codegen.targets.target import Target

#: Architecture -> its target.
TARGETS: dict[str, Target] = {t.arch: t for t in (HOPPER, AMPERE, AMPERE_SM86, ADA)}


def target_for(arch: str) -> Target:
    """The target of architecture ``arch``.

    Raises:
        ValueError: no target generates code for ``arch``.
    """
    if arch not in TARGETS:
        raise ValueError(f"no code generation target for {arch} (targets: "
                         f"{', '.join(sorted(TARGETS))})")
    return TARGETS[arch]


def target_of_options(compile_options: tuple[str, ...] | list[str]) -> Target:
    """The target a kernel compiled with ``compile_options`` was built for (its ``-arch``).

    Raises:
        ValueError: the options name no architecture, or one without a target.
    """
    arch = next((option.split("=", 1)[1] for option in compile_options
                 if option.startswith("-arch=")), None)
    if arch is None:
        raise ValueError(f"compile options {tuple(compile_options)}: names no architecture")
    return target_for(arch)


__all__ = ["ADA", "AMPERE", "AMPERE_SM86", "HOPPER", "TARGETS", "AmpereTarget", "HopperTarget",
           "Mma", "MmaPart", "Target", "target_for", "target_of_options"]
