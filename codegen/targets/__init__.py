"""Code generation's targets: what one GPU architecture needs of the text and its build.

The sProgram says what runs on which sEU in which order; a target says how, on one
architecture: the compile options (NVRTC's and nvcc's, an exported kernel's build line)
and the instructions of the matrix products, their waits, a stage's arming, the register
budgets and the accumulator fragment's layout. A kernel's target is its sProgram's
architecture (:func:`target_for`): Hopper's, and the Ampere class's (sm_80,
sm_86, sm_89), which write the same sPrograms with cp.async and mma.sync.
"""

from collections.abc import Mapping
from typing import Any

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


def target_of_kernel(compile_options: tuple[str, ...] | list[str],
                     extra: Mapping[str, Any] | None = None) -> Target:
    """The target a kernel was generated for: the architecture its artifact records
    (``extra["code_arch"]``, a kernel compiled for a newer GPU than its code's), else the
    one its ``-arch`` option names.

    Raises:
        ValueError: neither names an architecture, or the one named has no target.
    """
    code_arch = (extra or {}).get("code_arch")
    if code_arch:
        return target_for(str(code_arch))
    arch = next((option.split("=", 1)[1] for option in compile_options
                 if option.startswith("-arch=")), None)
    if arch is None:
        raise ValueError(f"compile options {tuple(compile_options)}: names no architecture")
    return target_for(arch)


__all__ = ["ADA", "AMPERE", "AMPERE_SM86", "HOPPER", "TARGETS", "AmpereTarget", "HopperTarget",
           "Mma", "MmaPart", "Target", "target_for", "target_of_kernel"]
