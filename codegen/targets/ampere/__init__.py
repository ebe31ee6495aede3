"""The Ampere-class target (A100, A10, A40, L40S, RTX 4090; sm_80, sm_86, sm_89).

:class:`AmpereTarget` writes the pipeline's and the operators' requests with ``cp.async``
(:mod:`~codegen.targets.ampere.copies`: the tile copies TMA does on Hopper, by the loading
threads) and ``mma.sync`` fed by ``ldmatrix`` (:mod:`~codegen.targets.ampere.mma_sync`).
"""

from codegen.targets.ampere import copies, mma_sync
from codegen.targets.ampere.target import ADA, AMPERE, AMPERE_SM86, AmpereTarget

__all__ = ["ADA", "AMPERE", "AMPERE_SM86", "AmpereTarget", "copies", "mma_sync"]
