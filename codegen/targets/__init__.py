"""Code generation's targets: what one GPU architecture needs of the text and its build.

The sProgram says what runs on which sEU in which order; a target says how, on one
architecture. Today a target owns the compile options (NVRTC's and nvcc's) and the build
line of an exported kernel; Hopper (sm_90a) is the one target.
"""

from codegen.targets.hopper import HOPPER, write_mma
from codegen.targets.mma import Mma, MmaPart
from codegen.targets.target import Target

__all__ = ["HOPPER", "Mma", "MmaPart", "Target", "write_mma"]
