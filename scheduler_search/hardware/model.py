"""The hardware abstraction: a Device (the GPU), its EUs (SMs) and their sEUs.

PipeThreader's two-level view: a Device is a set of identical EUs (streaming
multiprocessors) with shared limits (shared memory, registers, threads, L2); each EU has
specialised execution units (sEUs) that run sTasks. Async sEUs (TMA, tensor cores through
wgmma) run a task while the issuing warp goes on; sync sEUs (CUDA cores, SFU) occupy the
issuing warps until done. Rates are per EU so that the cost model can simulate one SM.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any

from scheduler_search.canonical import canonical_sha256


class UnitKind(StrEnum):
    """Kinds of specialised execution unit (sEU) inside one SM.

    Attributes:
        TMA: the Tensor Memory Accelerator: async bulk tensor copies global <-> shared (sm_90).
        TENSOR_CORE: matrix units; async ``wgmma`` on sm_90, sync ``mma.sync`` on sm_80.
        CUDA_CORE: the FP32/INT lanes: FMA, max, sums, address math, plain loads and stores.
        SFU: special-function units (``ex2``, ``rcp``).
        LSU: load/store units issuing ``cp.async`` (the sm_80 copy path).
    """

    TMA = "tma"
    TENSOR_CORE = "tensor_core"
    CUDA_CORE = "cuda_core"
    SFU = "sfu"
    LSU = "lsu"


@dataclass(frozen=True)
class Capabilities:
    """What an architecture's SMs offer code generation, stated with the architecture and
    never read off a compute capability: a later architecture does not run an earlier
    one's architecture-specific (``sm_90a``) features, so a GPU of compute capability 10
    must not be offered Hopper's code.

    Attributes:
        cp_async: thread-issued asynchronous copies global -> shared (``cp.async``),
            committed and waited in groups (sm_80 and later).
        mma_sync: warp-synchronous tensor-core MMAs (``mma.sync``) fed by ``ldmatrix``
            (sm_80 and later).
        tma: bulk tensor copies (``cp.async.bulk.tensor``) completing on an mbarrier.
        wgmma: warpgroup MMAs (``wgmma.mma_async``), issued asynchronously.
        clusters: thread-block clusters, with TMA multicast to their blocks.
        setmaxnreg: registers moved between warpgroups at run time.
        fp8_mma: tensor-core MMAs on 8-bit floats (e4m3, e5m2).
    """

    cp_async: bool = False
    mma_sync: bool = False
    tma: bool = False
    wgmma: bool = False
    clusters: bool = False
    setmaxnreg: bool = False
    fp8_mma: bool = False


#: Ampere (sm_80, sm_86): thread-issued async copies and warp-synchronous MMAs.
AMPERE_CAPABILITIES = Capabilities(cp_async=True, mma_sync=True)
#: Ada (sm_89): Ampere's, with 8-bit float ``mma.sync``.
ADA_CAPABILITIES = Capabilities(cp_async=True, mma_sync=True, fp8_mma=True)
#: Hopper (sm_90a): every capability pipetune's code generation uses.
HOPPER_CAPABILITIES = Capabilities(cp_async=True, mma_sync=True, tma=True, wgmma=True,
                                   clusters=True, setmaxnreg=True, fp8_mma=True)


@dataclass(frozen=True)
class SEU:
    """One specialised execution unit of an SM.

    ``rate_per_cycle`` is per SM: bytes per cycle for copy units, operations (lane ops,
    or flops for tensor cores) per cycle otherwise; ``latency_cycles`` is the fixed time
    from issue to the first result, paid once per task. ``operand_bytes_per_cycle``: for
    tensor cores whose warps each read their operands from shared memory (``mma.sync``
    fed by ``ldmatrix``), the shared-memory bytes a cycle that feed them per SM (0: not a
    limit, as for ``wgmma``, which reads B once for the warpgroup).
    """

    kind: UnitKind
    is_async: bool
    rate_per_cycle: float
    latency_cycles: float
    instruction: str
    operand_bytes_per_cycle: float = 0.0


@dataclass(frozen=True)
class Device:
    """A GPU model: per-SM limits, global figures and the sEUs of each SM.

    ``source`` says where the figures come from ("datasheet", "live" device properties);
    individual estimates are marked in the catalog's comments.
    """

    name: str
    arch: str
    compute_capability: tuple[int, int]
    sm_count: int
    smem_per_sm_bytes: int
    smem_per_block_bytes: int
    regs_per_sm: int
    regs_per_thread_max: int
    max_threads_per_block: int
    max_threads_per_sm: int
    l2_bytes: int
    clock_mhz: float
    memory_bytes: int
    mem_bandwidth_gbps: float
    l2_bandwidth_gbps: float
    tensor_flops_per_cycle_per_sm: dict[str, float]
    units: tuple[SEU, ...]
    source: str = "datasheet"
    software: dict[str, str] = field(default_factory=dict)
    #: Clusters of each size (blocks of one SM each) that run at once, where fewer than
    #: ``sm_count // size``: a cluster's blocks share a GPC, so SMs a GPC cannot group idle.
    resident_clusters: dict[int, int] = field(default_factory=dict)
    #: What code generation may use (not part of :meth:`identity`: it follows from the
    #: architecture the rest names).
    capabilities: Capabilities = field(default_factory=Capabilities)

    def clusters_at_once(self, size: int) -> int:
        """How many clusters of ``size`` one-SM blocks run at the same time."""
        return self.resident_clusters.get(size, self.sm_count // size)

    @cached_property
    def has_tma(self) -> bool:
        return UnitKind.TMA in self.unit_kinds()

    def unit(self, kind: UnitKind) -> SEU:
        """The sEU of ``kind``; ``KeyError`` when this SM has none."""
        for unit in self.units:
            if unit.kind is kind:
                return unit
        raise KeyError(f"{self.name} has no {kind.value} unit")

    def unit_kinds(self) -> tuple[UnitKind, ...]:
        return self._unit_kinds

    @cached_property
    def _unit_kinds(self) -> tuple[UnitKind, ...]:
        # Memoised (as has_tma): the schedule space asks for every point it checks.
        return tuple(u.kind for u in self.units)

    def tensor_tflops(self, dtype: str) -> float:
        """Peak dense tensor-core TFLOP/s for ``dtype`` inputs."""
        per_cycle = self.tensor_flops_per_cycle_per_sm[dtype]
        return per_cycle * self.sm_count * self.clock_mhz * 1e6 / 1e12

    def identity(self) -> dict[str, Any]:
        """The fields that identify the device for caching (hardware and software)."""
        return {
            "name": self.name,
            "compute_capability": list(self.compute_capability),
            "sm_count": self.sm_count,
            "memory_bytes": self.memory_bytes,
            "l2_bytes": self.l2_bytes,
            "software": dict(sorted(self.software.items())),
        }

    def fingerprint(self) -> str:
        """Stable sha256 of :meth:`identity`: the cache's device key."""
        return canonical_sha256(self.identity())

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self)))
