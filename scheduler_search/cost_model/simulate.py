"""The intra-SM list scheduler: simulated time of one block over an sProgram.

Every role (the producer warp, each consumer warpgroup) issues its instruction stream in
sProgram order. At each step the scheduler picks, among all roles, the next instruction
that can start earliest: after its data dependences and barriers are met, after its
role is free to issue, and after its sEU is free. Async sEUs (TMA, wgmma) let the role go
on after issuing; sync sEUs (CUDA cores, SFU) hold it until they finish. An sEU runs one
task at a time at its full per-SM rate (throughput), and a result is visible ``latency``
cycles after the task leaves the sEU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler_search.cost_model.timings import TimingModel, Work
from scheduler_search.hardware.model import Device, UnitKind
from scheduler_search.ir import STask, STaskGraph, STaskKind
from scheduler_search.ops import DTYPE_BYTES
from scheduler_search.sprogram.schedule import BarrierKind, SProgram, UnitOp
from scheduler_search.sprogram.validate import row_axis

#: Cycles from a plain ld.global/st.global to its data (estimate, L2 hit).
GLOBAL_ACCESS_LATENCY_CYCLES = 600.0
#: Cycles from an mbarrier's completion to the waiting warp running again (try_wait
#: round trip; estimate). Paid on every full/empty wait, so short k-steps cost more.
MBARRIER_WAIT_CYCLES = 40.0
#: Cycles a role spends issuing an async operation (TMA copy, wgmma) before going on.
ASYNC_ISSUE_CYCLES = 8.0
#: A consumer warpgroup that issues its own TMA loads (no producer warp) also computes
#: coordinates and arms the stage's mbarrier with expect_tx first (estimate).
CONSUMER_LOAD_ISSUE_CYCLES = 64.0

Key = tuple[str, str, int]  # (sTask, owner role, iteration); -1 prologue, trips epilogue


@dataclass(frozen=True)
class TimelineEntry:
    """One sTask instance on one sEU (times in microseconds from the block's start)."""

    unit: str
    stask: str
    role: str
    iteration: int
    start_us: float
    end_us: float


@dataclass
class BlockSimulation:
    """Result of simulating one block for ``iterations`` loop trips (cycles)."""

    iterations: int
    iteration_end: list[float]
    end: float
    entries: list[tuple[UnitKind, str, str, int, float, float]] = field(default_factory=list)
    busy: dict[UnitKind, float] = field(default_factory=dict)
    loop_busy: dict[UnitKind, float] = field(default_factory=dict)

    @property
    def loop_busy_per_iteration(self) -> float:
        """The busiest sEU's loop work per (owner, iteration): a floor for the pace."""
        return max(self.loop_busy.values(), default=0.0) / max(self.iterations, 1)


@dataclass(frozen=True)
class _Instr:
    unit: UnitKind
    op: UnitOp
    iteration: int  # loop iteration this instance works on
    owner: str  # whose tile: the role itself, or "*" for a load shared by all consumers


def _row_share(sprogram: SProgram, graph: STaskGraph, stask: str) -> float:
    task = graph.stask(stask)
    if sprogram.consumer_split == "pingpong" or row_axis(sprogram, graph) not in task.axes:
        return 1.0
    return 1.0 / sprogram.roles.consumer_warpgroups


#: Tensor-core work per flop of an MMA by its input type, against 16-bit inputs: Hopper's
#: wgmma multiplies 8-bit floats at twice the rate (k32 in the time of k16).
MMA_WORK_PER_FLOP = {"float8_e4m3": 0.5, "float8_e5m2": 0.5}


def _warp_operand_bytes(points: float, rows: float, n: int, dtype: str) -> float:
    """Shared-memory bytes a warpgroup's four warps read for an MMA of ``points``
    multiply-adds over ``rows`` x ``n`` outputs, each warp its 16-row share of A and all of
    B (``mma.sync`` fed by ``ldmatrix``): per k element, ``rows`` of A and ``4 n`` of B."""
    if rows <= 0 or n <= 0:
        return 0.0
    k_elements = points / (rows * n)
    return k_elements * (rows + 4 * n) * DTYPE_BYTES[dtype]


def _multicast_share(sprogram: SProgram, stask: str) -> float:
    """The part of a load's tile one block's TMA fetches: a slice of a multicast one."""
    cluster = sprogram.cluster
    return 1.0 / cluster.size if cluster and stask in cluster.multicast else 1.0


def instance_work(sprogram: SProgram, graph: STaskGraph, stask: str, unit: UnitKind) -> Work:
    """The work of one instance of ``stask`` issued by one role (a share of it for an
    sTask that runs once every few trips)."""
    work = _whole_work(sprogram, graph, stask, unit)
    every = graph.stask(stask).every_trips
    return work if every == 1 else Work(work.amount / every, mma_n=work.mma_n,
                                        warp_operand_bytes=work.warp_operand_bytes / every)


def _whole_work(sprogram: SProgram, graph: STaskGraph, stask: str, unit: UnitKind) -> Work:
    task = graph.stask(stask)
    plan = graph.plan
    points = plan.points(stask)
    if task.kind in (STaskKind.LOAD, STaskKind.STORE):
        staged = task.output.tensor if task.kind is STaskKind.LOAD else task.inputs[0].tensor
        elements = plan.tile_elements(staged)
        if unit in (UnitKind.TMA, UnitKind.LSU):
            dtype = graph.tensors[task.output.tensor].dtype
            share = (_multicast_share(sprogram, stask) if task.kind is STaskKind.LOAD
                     else _row_share(sprogram, graph, stask))
            return Work(elements * DTYPE_BYTES[dtype] * share)
        return Work(elements * _row_share(sprogram, graph, stask))
    share = _row_share(sprogram, graph, stask)
    if task.kind is STaskKind.MMA:
        n_extent = plan.stask_extents[stask][task.output.axes[0 if sprogram.swap_ab else 1]]
        dtype = graph.tensors[task.inputs[0].tensor].dtype
        per_flop = MMA_WORK_PER_FLOP.get(dtype, 1.0)
        return Work(2.0 * points * share * per_flop, mma_n=n_extent,
                    warp_operand_bytes=_warp_operand_bytes(
                        points * share, plan.stask_extents[stask][task.output.axes[
                            1 if sprogram.swap_ab else 0]] * share, n_extent, dtype))
    return Work(task.ops_per_point * points * share)


def simulate_block(
    sprogram: SProgram,
    graph: STaskGraph,
    device: Device,
    timings: TimingModel,
    iterations: int,
) -> BlockSimulation:
    """Simulate one block (one output tile per consumer owner) for ``iterations`` trips."""
    return BlockScheduler(sprogram, graph, device, timings, iterations).run()


class BlockScheduler:
    """The list scheduler of one block: each role's instruction stream (:meth:`streams`),
    when an instruction may start (:meth:`ready_time`), and issuing the earliest one
    (:meth:`run`)."""

    def __init__(self, sprogram: SProgram, graph: STaskGraph, device: Device,
                 timings: TimingModel, iterations: int) -> None:
        self.sprogram, self.graph, self.device, self.timings = sprogram, graph, device, timings
        self.n = iterations
        self.deps = graph.dependencies()
        self.phase = {t.name: t.phase for t in graph.stasks}
        roles = sprogram.roles
        self.consumers = roles.consumer_roles
        self.pingpong = sprogram.consumer_split == "pingpong"
        self.async_copy = {
            t.name
            for t in graph.stasks
            if t.kind is STaskKind.LOAD
            and sprogram.mapping[t.name] in (UnitKind.TMA, UnitKind.LSU)
        }
        self.mmas = [t.name for t in graph.stasks
                     if t.kind is STaskKind.MMA and t.phase == "loop"]
        self.overlap = sprogram.order != "serial"
        # The loader's loads form one sequence of (owner, iteration) slots per stream
        # ring: shared by all consumers (cooperative) or one owner's whole loop after the
        # other's (pingpong). Load number g reuses the ring slot of load g - depth.
        self.owners = list(self.consumers) if self.pingpong else ["*"]
        self.load_seq = [(o, j) for o in self.owners for j in range(iterations)]
        self.seq_index = {key: g for g, key in enumerate(self.load_seq)}
        self.depth_of = {m: sprogram.stages[s] for s, ms in sprogram.streams.items() for m in ms}
        self.empty_wait = self._empty_waits()
        self.alternate = len(self.consumers) > 1 and any(
            b.kind is BarrierKind.TURN for b in sprogram.barriers)
        self.loop_mmas = [(o.stask, o.lead) for _, o in sprogram.role_stream(self.consumers[0])
                          if o.stask in self.mmas]
        self.streams = self._streams()
        self.done: dict[Key, float] = {}
        self.issued: dict[Key, float] = {}
        self.unit_free: dict[UnitKind, float] = {}
        self.role_time = {r: 0.0 for r in self.streams}
        self.cursor = {r: 0 for r in self.streams}
        self.work: dict[tuple[str, UnitKind], Work] = {}
        # Loop progress per (owner, iteration) in load order: a pingpong block runs its
        # owners' main loops one after the other.
        self.sim = BlockSimulation(iterations=len(self.load_seq),
                                   iteration_end=[0.0] * len(self.load_seq), end=0.0)

    # ----- instruction streams --------------------------------------------------------
    def _empty_waits(self) -> dict[tuple[str, str, int], list[Key]]:
        """For each load slot, the reads of the slot's previous load it waits for."""
        waits: dict[tuple[str, str, int], list[Key]] = {}
        for barrier in self.sprogram.barriers:
            if not barrier.name.endswith("_empty"):
                continue
            last_reader, depth = barrier.deps[0]
            for g, (owner, j) in enumerate(self.load_seq):
                if g - depth >= 0:
                    prev_owner, prev_j = self.load_seq[g - depth]
                    readers = self.consumers if prev_owner == "*" else (prev_owner,)
                    waits[(barrier.waiter, owner, j)] = [
                        (last_reader, r, prev_j) for r in readers]
        return waits

    def _streams(self) -> dict[str, list[_Instr]]:
        roles = self.sprogram.roles
        loader = "producer" if roles.warp_specialized else self.consumers[0]
        all_roles = ([loader] if roles.warp_specialized else []) + list(self.consumers)
        return {role: self._role_stream(role) for role in all_roles}

    def _role_stream(self, role: str) -> list[_Instr]:
        """``role``'s instructions in issue order: prologue, its loop (with the loads it
        issues), epilogue."""
        ops = self.sprogram.role_stream(role)
        pro = [(u, o) for u, o in ops if self.phase[o.stask] == "prologue"]
        loop = [(u, o) for u, o in ops if self.phase[o.stask] == "loop"]
        epi = [(u, o) for u, o in ops if self.phase[o.stask] == "epilogue"]
        instrs: list[_Instr] = []
        for unit, op in pro:
            if op.stask in self.async_copy:
                instrs += [_Instr(unit, op, -1, o) for o in self.owners]
            else:
                instrs.append(_Instr(unit, op, -1, role))
        loads = [(u, o) for u, o in loop if o.stask in self.async_copy]
        own_loop = [(u, o) for u, o in loop if o.stask not in self.async_copy]
        load_instrs = [_Instr(u, o, j, owner) for owner, j in self.load_seq for u, o in loads]
        # Lead ops run one iteration ahead: their first instance is issued before the loop.
        lead_first = [_Instr(u, o, 0, role) for u, o in own_loop if o.lead]
        # A load read by a lead op (next iteration's MMA) is needed one step earlier.
        lead_of = {m: max((o.lead for _, o in own_loop if (m, 0) in self.deps[o.stask]),
                          default=0) for m in self.depth_of}
        if self.sprogram.roles.warp_specialized:
            instrs += load_instrs + lead_first
            pending: list[_Instr] = []
        else:
            # Without a producer warp, a stream of depth d issues the loads of iteration
            # j + d - 1 at loop step j (the classic multistage loop), the first ones
            # before the loop.
            pending = sorted(load_instrs, key=lambda ins: self._issue_step(ins, lead_of))
            while pending and self._issue_step(pending[0], lead_of) < 0:
                instrs.append(pending.pop(0))
            instrs += lead_first
        for j in range(self.n):
            while pending and self._issue_step(pending[0], lead_of) <= j:
                instrs.append(pending.pop(0))
            for unit, op in own_loop:
                it = j + op.lead
                if it < self.n:
                    instrs.append(_Instr(unit, op, it, role))
        instrs += [_Instr(u, o, self.n, role) for u, o in epi]
        return instrs

    def _issue_step(self, ins: _Instr, lead_of: dict[str, int]) -> int:
        """Loop step at which a consumer issues a load (no producer warp)."""
        name = ins.op.stask
        return ins.iteration - (self.depth_of[name] - 1) - lead_of[name]

    # ----- when an instruction may start ---------------------------------------------
    def _owner_of(self, dep: str, role: str) -> str:
        if dep in self.async_copy and not self.pingpong:
            return "*"
        return role

    def _tensor_core_turn(self, name: str, role: str, j: int) -> Key | None:
        """The MMA whose issue this role's first loop MMA must follow (named barriers).

        Turns are taken per loop step in stream order: cooperative warpgroups alternate
        every step (FlashAttention-3's ping-pong); pingpong warpgroups own separate tiles
        and alternate per whole main loop. Instances issued before the loop (the lead
        MMA's first) take no turn.
        """
        loop_mmas, consumers, n = self.loop_mmas, self.consumers, self.n
        if not self.alternate or not loop_mmas or name != loop_mmas[0][0]:
            return None
        step = j - loop_mmas[0][1]
        last, last_lead = loop_mmas[-1]
        if step < 0:
            return None
        index = consumers.index(role)
        if self.pingpong:
            if step != 0 or index == 0:
                return None
            return (last, consumers[index - 1], n - 1)
        if index > 0:
            target = (last, consumers[index - 1], step + last_lead)
        elif step >= 1:
            target = (last, consumers[-1], step - 1 + last_lead)
        else:
            return None
        return target if target[2] < n else None

    def _wanted(self, role: str, ins: _Instr) -> list[Key]:
        """The instances ``ins`` waits for: its data dependences, or a load's free slot."""
        name, j, phase = ins.op.stask, ins.iteration, self.phase
        if name in self.async_copy:
            return self.empty_wait.get((name, ins.owner, j), [])
        me = ins.owner if ins.owner != "*" else role
        wanted: list[Key] = []
        for dep, dist in self.deps[name]:
            if phase[dep] == "prologue":
                wanted.append((dep, self._owner_of(dep, me), -1))
            elif phase[name] == "epilogue":
                last = self.n if phase[dep] == "epilogue" else self.n - 1
                wanted.append((dep, self._owner_of(dep, me), last))
            elif j - dist >= 0:
                wanted.append((dep, self._owner_of(dep, me), j - dist))
        return wanted

    def ready_time(self, role: str, ins: _Instr) -> float | None:
        """Earliest start allowed by dependences and barriers; None while blocked."""
        name = ins.op.stask
        t = 0.0
        if name not in self.async_copy:
            turn = self._tensor_core_turn(name, role, ins.iteration)
            if turn is not None:
                if turn not in self.issued:
                    return None
                t = self.issued[turn]
        for key in self._wanted(role, ins):
            if key not in self.done:
                return None
            through_mbarrier = key[0] in self.async_copy or name in self.async_copy
            t = max(t, self.done[key] + (MBARRIER_WAIT_CYCLES if through_mbarrier else 0.0))
        return t

    # ----- issuing ---------------------------------------------------------------------
    def run(self) -> BlockSimulation:
        for _ in range(sum(len(s) for s in self.streams.values())):
            issue_at, role = self._earliest()
            self._issue(role, issue_at)
        return self.sim

    def _earliest(self) -> tuple[float, str]:
        """The instruction that issues first; ties go to the older iteration, so a role
        running ahead does not starve the others of a shared sEU."""
        best: tuple[float, int, str] | None = None
        for role, instrs in self.streams.items():
            if self.cursor[role] >= len(instrs):
                continue
            ins = instrs[self.cursor[role]]
            ready = self.ready_time(role, ins)
            if ready is None:
                continue
            issue = max(ready, self.role_time[role])
            if not self.device.unit(ins.unit).is_async:
                # A sync sEU holds the issuing warps: they start when the sEU is free.
                issue = max(issue, self.unit_free.get(ins.unit, 0.0))
            candidate = (issue, ins.iteration, role)
            if best is None or candidate[:2] < best[:2]:
                best = candidate
        if best is None:
            raise RuntimeError(f"sProgram {self.sprogram.hash[:12]} deadlocks in simulation")
        return best[0], best[2]

    def _issue(self, role: str, issue_at: float) -> None:
        """Run ``role``'s next instruction on its sEU from ``issue_at``; record it."""
        ins = self.streams[role][self.cursor[role]]
        self.cursor[role] += 1
        seu = self.device.unit(ins.unit)
        task = self.graph.stask(ins.op.stask)
        key_w = (task.name, ins.unit)
        if key_w not in self.work:
            self.work[key_w] = instance_work(self.sprogram, self.graph, task.name, ins.unit)
        busy = self.timings.busy_cycles(task, seu, self.work[key_w])
        latency = self.timings.latency_cycles(task, seu)
        if ins.unit is UnitKind.CUDA_CORE and task.kind in (STaskKind.LOAD, STaskKind.STORE):
            latency = GLOBAL_ACCESS_LATENCY_CYCLES
        # An sTask that runs once every few trips waits out its latency once for them all.
        latency /= task.every_trips
        # Async work queues on its sEU in issue order; the role goes on meanwhile.
        start = max(issue_at, self.unit_free.get(ins.unit, 0.0))
        self.unit_free[ins.unit] = start + busy
        finish = start + busy + latency
        owner = ins.owner if ins.owner != "*" else ("*" if task.name in self.async_copy else role)
        key = (task.name, owner, ins.iteration)
        self.done[key] = finish
        self.issued[key] = issue_at
        self._record(ins, task.name, task.phase, role, owner, start, busy, finish)
        if seu.is_async:
            self._after_async_issue(role, ins, task, owner, issue_at, finish)
        else:
            self.role_time[role] = finish

    def _after_async_issue(self, role: str, ins: _Instr, task: STask, owner: str,
                           issue_at: float, finish: float) -> None:
        """When the role may go on after issuing async work (and waiting for wgmma)."""
        issue = ASYNC_ISSUE_CYCLES
        if task.name in self.async_copy and role != "producer":
            issue = CONSUMER_LOAD_ISSUE_CYCLES
        self.role_time[role] = issue_at + issue
        if task.kind is STaskKind.MMA and task.phase == "loop":
            # wgmma.wait_group: serial waits for this MMA; overlap keeps one in flight.
            if not self.overlap:
                self.role_time[role] = finish
            elif task.name == self.mmas[-1] and self.mmas[0] == self.mmas[-1]:
                prev = self.done.get((task.name, owner, ins.iteration - 1))
                if prev is not None:
                    self.role_time[role] = max(self.role_time[role], prev)

    def _record(self, ins: _Instr, stask: str, phase: str, role: str, owner: str,
                start: float, busy: float, finish: float) -> None:
        """The sEU's busy time, the timeline entry (when the sEU is occupied; the result
        is visible ``latency`` cycles later, at ``finish``), the iteration's end."""
        sim = self.sim
        sim.busy[ins.unit] = sim.busy.get(ins.unit, 0.0) + busy
        if phase == "loop":
            sim.loop_busy[ins.unit] = sim.loop_busy.get(ins.unit, 0.0) + busy
        sim.entries.append((ins.unit, stask, role if owner == "*" else owner, ins.iteration,
                            start, start + busy))
        if 0 <= ins.iteration < self.n and phase == "loop":
            g = self.seq_index[(owner if self.pingpong else "*", ins.iteration)]
            sim.iteration_end[g] = max(sim.iteration_end[g], finish)
        sim.end = max(sim.end, finish)
