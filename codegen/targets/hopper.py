"""Hopper (H100, H200): TMA, wgmma and setmaxnreg, which the ``a`` suffix of sm_90a
enables; code built so runs on compute capability 9.0 only."""

from __future__ import annotations

from codegen.targets.target import Target

HOPPER = Target(arch="sm_90a")
