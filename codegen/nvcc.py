"""Compile a generated source with ``nvcc`` (no GPU needed) and read ptxas's report.

``nvcc -cubin -Xptxas -v`` for the target's architecture (``codegen.targets``) compiles
the same source that NVRTC compiles on a GPU machine; its resource report gives registers, spill
stores / loads, stack frame and shared memory per kernel. Used by the tests and by
``pipetune render --check``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

from codegen.targets import HOPPER, Target

NVCC_ARCH = HOPPER.nvcc_arch
_USED = re.compile(r"Used (\d+) registers")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


@dataclass(frozen=True)
class PtxasReport:
    """ptxas's resource usage of the kernel, or the compiler's errors."""

    ok: bool
    registers: int = 0
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    log: str = ""

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads


def nvcc_path() -> str | None:
    return shutil.which("nvcc")


def compile_report(source: str, timeout_s: float = 300.0,
                   target: Target = HOPPER) -> PtxasReport:
    """Compile ``source`` to a cubin for ``target`` (Hopper's unless given); the report of
    its (one) kernel."""
    nvcc = nvcc_path()
    if nvcc is None:
        raise FileNotFoundError("nvcc is not on PATH")
    with tempfile.TemporaryDirectory(prefix="pipetune-nvcc-") as tmp:
        src = os.path.join(tmp, "kernel.cu")
        with open(src, "w") as f:
            f.write(source)
        cmd = [nvcc, *target.nvcc_arch, f"-std={target.language}", "-cubin", "-Xptxas", "-v", "-o",
               os.path.join(tmp, "kernel.cubin"), src]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        return PtxasReport(ok=False, log=log)
    used = _USED.findall(log)
    spill = _SPILL.findall(log)
    stack, stores, loads = (int(v) for v in spill[-1]) if spill else (0, 0, 0)
    return PtxasReport(
        ok=True,
        registers=int(used[-1]) if used else 0,
        stack_bytes=stack,
        spill_stores=stores,
        spill_loads=loads,
        log=log,
    )
