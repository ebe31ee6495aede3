"""The Hopper target (H100, H200; sm_90a): its instructions and the primitives only it has.

:class:`HopperTarget` says how the pipeline's and the operators' requests are written on
sm_90a. The primitive families only Hopper has live beside it, one module each, and
register their snippets as the architecture-neutral ones in :mod:`codegen.cuda` do:
``wgmma`` (the asynchronous warpgroup MMA, its shared-memory descriptors and fences),
``regs`` (``setmaxnreg``), ``cluster`` (thread-block clusters: ranks, the cluster barrier,
distributed shared memory) and ``ldstmatrix`` (``stmatrix``, whose layout is a wgmma
accumulator's).
"""

from codegen.targets.hopper import cluster, ldstmatrix, regs, wgmma
from codegen.targets.hopper.target import HOPPER, HopperTarget
from codegen.targets.hopper.wgmma import SmemMatrix

__all__ = ["HOPPER", "HopperTarget", "SmemMatrix", "cluster", "ldstmatrix", "regs", "wgmma"]
