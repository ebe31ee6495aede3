"""sPrograms: an sTask-graph's tiles mapped onto sEUs, ordered, with barriers and roles.

An :class:`SProgram` is the schedule of one kernel: the tiling, the sTask-to-sEU mapping,
one ordered list of sTask instances per sEU (:class:`UnitOp`), the barrier sTasks that
order them across sEUs and warps (:class:`BarrierTask`), the warp roles, the pipeline
depth per operand stream and the tile order over the grid. It serialises to canonical
JSON whose sha256 is its identity (and the compiled kernel's cache key).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any, Literal

from scheduler_search.canonical import canonical_json, sha256_hex
from scheduler_search.hardware.model import UnitKind

#: 128 threads: wgmma, setmaxnreg and the consumer roles work in units of warpgroups.
WARPGROUP_THREADS = 128
WARP_THREADS = 32

SCHEDULE_VERSION = 1


def tile_owners(consumer_split: str, consumer_warpgroups: int) -> int:
    """Tiles one unit of work holds: one per consumer warpgroup when the consumers ping-pong
    (each owns a tile of its own), else one (they split its rows)."""
    return consumer_warpgroups if consumer_split == "pingpong" else 1


@dataclass(frozen=True)
class UnitOp:
    """One sTask instance in an sEU's ordered list.

    Args:
        stask: the sTask's name in the graph.
        role: who issues it: ``producer`` or ``consumer<i>``.
        step: position in that role's instruction stream (orders work across sEUs).
        lead: iterations ahead of the role's current loop iteration (software pipelining:
            ``mma_qk`` with lead 1 computes the next tile's scores while the softmax of the
            current one runs).
    """

    stask: str
    role: str
    step: int
    lead: int = 0


class BarrierKind(StrEnum):
    """What a barrier sTask waits for, in words of no architecture (a code-generation
    target says how it keeps each: Hopper with an mbarrier ring, a named barrier, and
    wgmma's ``wait_group``)."""

    #: A stage of a ring (or a tile buffer): its loads have landed, or its readers are
    #: done with it.
    STAGE = "stage"
    #: The consumer warpgroups' turns on the tensor cores.
    TURN = "turn"
    #: An MMA group's completion: its result is read, or its own group stays in flight.
    MMA_WAIT = "mma_wait"


#: Each kind as schedules spell it when serialised: the names the kinds had before they
#: were made architecture-neutral, kept so that every schedule keeps its sha256 (its
#: identity, its cache key and its kernel's name).
SERIALISED_KINDS: dict[BarrierKind, str] = {
    BarrierKind.STAGE: "mbarrier", BarrierKind.TURN: "named", BarrierKind.MMA_WAIT: "wgmma_wait"}
_KINDS_BY_SERIALISED = {spelling: kind for kind, spelling in SERIALISED_KINDS.items()}


def barrier_kind(spelling: str) -> BarrierKind:
    """The kind a serialised schedule spells ``spelling`` (its old name or its own)."""
    return _KINDS_BY_SERIALISED.get(spelling) or BarrierKind(spelling)


@dataclass(frozen=True)
class BarrierTask:
    """A barrier sTask created by Wait: ``waiter`` starts after every ``(sTask, distance)``
    dependency of iteration ``j - distance`` has completed.

    ``kind`` says what it waits for (:class:`BarrierKind`): a ring stage of ``slots``
    entries, the consumers' turns on the tensor cores, or an MMA group.
    """

    name: str
    waiter: str
    deps: tuple[tuple[str, int], ...]
    kind: BarrierKind = BarrierKind.STAGE
    slots: int = 1
    role: str = "consumer"


@dataclass(frozen=True)
class WarpRoles:
    """Warp specialisation: producer warps issue TMA, consumer warpgroups compute.

    Without warp specialisation every warp both loads and computes and ``producer_warps``
    is 0. Register budgets are per thread, as ``setmaxnreg`` sets them (multiples of 8).
    """

    warp_specialized: bool
    producer_warps: int
    consumer_warpgroups: int
    producer_regs: int
    consumer_regs: int

    @property
    def threads(self) -> int:
        # The producer warps occupy a whole warpgroup so that setmaxnreg can shrink it.
        producer = WARPGROUP_THREADS if self.warp_specialized else 0
        return producer + self.consumer_warpgroups * WARPGROUP_THREADS

    @property
    def consumer_roles(self) -> tuple[str, ...]:
        return tuple(f"consumer{i}" for i in range(self.consumer_warpgroups))

    def registers_per_block(self) -> int:
        producer = WARPGROUP_THREADS * self.producer_regs if self.warp_specialized else 0
        return producer + self.consumer_warpgroups * WARPGROUP_THREADS * self.consumer_regs


@dataclass(frozen=True)
class Raster:
    """Order in which output tiles are visited: along ``major`` first, in groups of
    ``swizzle`` tiles of the other axis, so that concurrently running tiles share
    operands in L2; or, ``heaviest_first``, where tiles further along the causal row
    axis carry more work (causal attention, the chunk scan), every tile of that axis's
    last index first, across all the other axes, then the next index back (the longest
    tiles start first and the shortest fill the last wave). ``stagger`` orders each
    tile's loop: it starts as many trips in as the tile's index along the first spatial
    axis, wrapping around, so tiles side by side add to different rows of a shared sum
    at any moment, not all to the same ones at once."""

    major: str
    swizzle: int = 1
    heaviest_first: bool = False
    stagger: bool = False


@dataclass(frozen=True)
class Cluster:
    """A thread-block cluster: ``size`` blocks whose tiles are neighbours along grid axis
    ``axis`` run together. The loads in ``multicast`` read the same tile for every block
    of the cluster (their tile has no ``axis`` coordinate, or, along a grid axis such as
    Mamba2's heads, neighbouring instances share their tensor): each block loads one
    ``1/size`` slice of it and the TMA delivers the slice to every block (multicast), so
    L2 serves the tile once per cluster, not once per block."""

    axis: str
    size: int
    multicast: tuple[str, ...]


@dataclass(frozen=True)
class StreamK:
    """Stream-K over a persistent grid: the tiles of the last ``waves`` waves (the partial
    wave, and ``waves - 1`` whole ones before it) are not given out whole but by
    reduction-loop trips, an equal share to every block, so no block idles while the
    last tiles finish. A tile whose trips fall to several blocks is summed, in block
    order (deterministic), by the block that finishes its part last; it stores it."""

    waves: int


#: Who adds a split-K cluster's partial sums: the first block, all of the tile, or every
#: block a share of the tile's output columns (``scattered``).
SplitKReduce = Literal["first_block", "scattered"]
SPLIT_K_REDUCES: tuple[SplitKReduce, ...] = ("first_block", "scattered")


@dataclass(frozen=True)
class SplitK:
    """Split-K over a thread-block cluster: the ``blocks`` blocks of one cluster run one
    output tile together, each an equal range of its reduction-loop trips, so a grid of
    few tiles still puts every SM on the loop (a decode GEMM's few weight tiles). Their
    fp32 partial sums meet in distributed shared memory, added in rank order
    (deterministic: the same bits whoever adds them). Unlike stream-K's parts, no sum
    goes through L2 and no block waits on another's global-memory count.

    ``reduce`` says who adds them: the cluster's ``first_block`` reads every peer's whole
    partial and stores the tile alone; ``scattered``, every block adds and stores its
    own share of the tile (a reduce-scatter), so each reads ``1 / blocks`` of the
    partials and the reading, the largest part of the sum, runs on every SM at once."""

    blocks: int
    reduce: SplitKReduce = "first_block"

    def to_dict(self) -> dict[str, Any]:
        """Only what differs from the first-block sum, so a schedule planned before
        ``reduce`` existed keeps its identity."""
        data: dict[str, Any] = {"blocks": self.blocks}
        if self.reduce != "first_block":
            data["reduce"] = self.reduce
        return data


@dataclass(frozen=True)
class SProgram:
    """A complete schedule of one operator workload on one architecture."""

    op: str
    params: dict[str, Any]
    arch: str
    tile: dict[str, int]
    mapping: dict[str, UnitKind]
    programs: dict[UnitKind, tuple[UnitOp, ...]]
    barriers: tuple[BarrierTask, ...]
    roles: WarpRoles
    streams: dict[str, tuple[str, ...]]
    stages: dict[str, int]
    order: str
    consumer_split: Literal["cooperative", "pingpong"]
    raster: Raster
    persistent: bool
    choices: dict[str, Any] = field(default_factory=dict)
    version: int = SCHEDULE_VERSION
    #: One block per tile when None. Serialised only when set, so a schedule without a
    #: cluster keeps the identity it had before clusters existed.
    cluster: Cluster | None = None
    #: Whole tiles only when None; serialised only when set, as ``cluster``.
    stream_k: StreamK | None = None
    #: Dimensions of the workload the kernel takes as run-time arguments (``("m",)``: one
    #: compiled kernel serves every m of a range; ``params`` holds the size it is planned
    #: and checked at). Serialised only when set, as ``cluster``.
    runtime_dims: tuple[str, ...] = ()
    #: The tensor cores compute the output transposed, ``Cᵀ = B Aᵀ``: the second spatial
    #: axis (GEMM's n) runs along wgmma's M, in the consumers' 64-row blocks, and the
    #: first (m) along its N, in any multiple of 8. A few rows of m then fill a narrow
    #: N instead of a 64-row block mostly of padding (cuBLAS's small-m kernels, "swap
    #: AB"). Serialised only when set, as ``cluster``.
    swap_ab: bool = False
    #: Each tile's loop over one block when None; serialised only when set, as ``cluster``.
    split_k: SplitK | None = None

    # ----- views -------------------------------------------------------------------------
    @property
    def owners(self) -> int:
        """Tiles one unit of work holds (:func:`tile_owners`)."""
        return tile_owners(self.consumer_split, self.roles.consumer_warpgroups)

    def role_stream(self, role: str) -> list[tuple[UnitKind, UnitOp]]:
        """The ordered instruction stream of one role, across sEUs."""
        ops = [(unit, op) for unit, unit_ops in self.programs.items() for op in unit_ops]
        return sorted((item for item in ops if item[1].role == role), key=lambda i: i[1].step)

    def stream_of(self, stask: str) -> str | None:
        for name, members in self.streams.items():
            if stask in members:
                return name
        return None

    # ----- serialisation -----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["programs"] = {str(u): [asdict(op) for op in ops] for u, ops in self.programs.items()}
        data["mapping"] = {k: str(v) for k, v in self.mapping.items()}
        for barrier in data["barriers"]:
            barrier["kind"] = SERIALISED_KINDS[barrier["kind"]]
        for optional in ("cluster", "stream_k", "runtime_dims", "swap_ab", "split_k"):
            if not data[optional]:
                del data[optional]
        for choice in ("heaviest_first", "stagger"):  # schedules from before keep their hash
            if not getattr(self.raster, choice):
                del data["raster"][choice]
        if self.split_k is not None:
            data["split_k"] = self.split_k.to_dict()
        return json.loads(json.dumps(data))

    def to_json(self) -> str:
        """Canonical JSON: sorted keys, no whitespace (stable across runs and machines)."""
        return canonical_json(self.to_dict())

    @cached_property
    def hash(self) -> str:
        """sha256 of the canonical JSON: the schedule's identity.

        Computed on first use and kept: an sProgram is never changed once built, and a
        search reads its hash many times per candidate (serialising a GEMM schedule costs
        far more than the lookup). The cached value lives in the instance's ``__dict__``,
        which equality and ``to_dict`` ignore (they read the fields) and pickling copies.
        """
        return sha256_hex(self.to_json())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SProgram:
        if data.get("version") != SCHEDULE_VERSION:
            raise ValueError(f"schedule version {data.get('version')} is not {SCHEDULE_VERSION}")
        return cls(
            op=data["op"],
            params=dict(data["params"]),
            arch=data["arch"],
            tile=dict(data["tile"]),
            mapping={k: UnitKind(v) for k, v in data["mapping"].items()},
            programs={
                UnitKind(u): tuple(UnitOp(**op) for op in ops)
                for u, ops in data["programs"].items()
            },
            barriers=tuple(
                BarrierTask(
                    name=b["name"],
                    waiter=b["waiter"],
                    deps=tuple((d[0], d[1]) for d in b["deps"]),
                    kind=barrier_kind(b["kind"]),
                    slots=b["slots"],
                    role=b["role"],
                )
                for b in data["barriers"]
            ),
            roles=WarpRoles(**data["roles"]),
            streams={k: tuple(v) for k, v in data["streams"].items()},
            stages=dict(data["stages"]),
            order=data["order"],
            consumer_split=data["consumer_split"],
            raster=Raster(**data["raster"]),
            persistent=data["persistent"],
            choices=dict(data["choices"]),
            version=data["version"],
            cluster=_cluster(data.get("cluster")),
            stream_k=StreamK(**data["stream_k"]) if data.get("stream_k") else None,
            runtime_dims=tuple(data.get("runtime_dims", ())),
            swap_ab=bool(data.get("swap_ab", False)),
            split_k=SplitK(**data["split_k"]) if data.get("split_k") else None,
        )

    @classmethod
    def from_json(cls, text: str) -> SProgram:
        return cls.from_dict(json.loads(text))


def _cluster(data: dict[str, Any] | None) -> Cluster | None:
    if data is None:
        return None
    return Cluster(axis=data["axis"], size=int(data["size"]), multicast=tuple(data["multicast"]))
