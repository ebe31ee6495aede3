"""Generated attention backward kernels on the CPU: sampled schedules of several workloads
compile for sm_90a without spills; the kernel's own trip arithmetic, run on the host,
visits every output tile once (the heaviest first when asked) and every (key tile, query
head, query tile) pair the mask lets through exactly once
and counts each query tile's contributors as its dq reduction expects; the launch
contract is the spec's; and what is not generated says why."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from kernel_checks import assert_compile_clean
from schedule_samples import sample_schedules

from codegen import feasibility, render, unsupported
from codegen.artifact import TensorArg, WorkspaceArg
from codegen.nvcc import nvcc_path
from codegen.render import lowering
from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_spec
from scheduler_search.space import ScheduleSpace
from scheduler_search.sprogram import check_valid, plan_sprogram
from scheduler_search.sprogram.validate import smem_plan

H200 = get_device("h200")
BASE = dict(batch=2, heads=8, kv_heads=2, seq_q=512, seq_kv=512, head_dim=128, causal=True,
            dtype="bfloat16")
#: Workloads the compile check samples: head sizes, masks, layouts, GQA and MHA, lengths
#: that are not a multiple of the tiles and query lengths other than the keys'.
WORKLOADS = (
    BASE,
    {**BASE, "head_dim": 64, "causal": False, "layout": "bhsd", "seq_q": 300, "seq_kv": 700,
     "dtype": "float16"},
    {**BASE, "head_dim": 64, "heads": 4, "kv_heads": 4, "seq_q": 1000, "seq_kv": 1000},
    {**BASE, "head_dim": 64, "deterministic": True},
)


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_sampled_backward_kernels_compile_without_spills() -> None:
    sources = []
    for params in WORKLOADS:
        spec = parse_spec("attention_backward", params)
        sources += [render(sp, spec, H200).source
                    for sp in sample_schedules(spec, H200, 2, seed=2)]
    reports = assert_compile_clean(sources)
    assert all(r.registers <= 248 for r in reports)


def _two_consumers_of_64_keys(params: dict) -> list:
    """The space's schedules with a 128-key tile split between two consumer warpgroups."""
    spec = parse_spec("attention_backward", params)
    space = ScheduleSpace(spec, H200, feasibility("attention_backward", H200))
    candidates, _ = space.enumerate()
    return [c.sprogram for c in candidates if c.sprogram.choices["tile_kv"] == 128
            and c.sprogram.roles.consumer_warpgroups == 2]


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_head_dim_128_offers_two_consumers_of_64_keys_within_their_setmaxnreg() -> None:
    """Past the 168 registers of 384 threads' entry: only at the consumers' 240 (the
    producer at 24), where ptxas fits them without a spill."""
    params = {**BASE, "causal": False, "layout": "bhsd"}
    sprograms = _two_consumers_of_64_keys(params)
    assert sprograms
    assert {sp.roles.consumer_regs for sp in sprograms} == {240}
    spec = parse_spec("attention_backward", params)
    reports = assert_compile_clean([render(sp, spec, H200).source for sp in sprograms[:2]])
    assert all(r.registers == 168 for r in reports)


def test_the_validator_admits_the_bytes_the_backward_kernel_asks_for() -> None:
    """Each consumer stages only its rows of dS; dq's pieces live in registers."""
    for params in WORKLOADS:
        spec = parse_spec("attention_backward", params)
        for sp in sample_schedules(spec, H200, 4, seed=3):
            graph = spec.graph(sp.tile)
            admitted = smem_plan(sp, graph, graph.plan)
            kernel = lowering(sp, H200).layout.smem
            assert sorted(admitted.sizes.values()) == sorted(kernel.sizes.values())
            assert check_valid(sp, spec, H200).smem_bytes == kernel.dynamic_bytes


def _host_program(source: str, heaviest_first: bool, stagger: bool = False) -> str:
    """The kernel's constants, integer helpers and raster, with a host ``main`` that walks
    the tiles in the raster's order and every key tile's trips as the loads and the dq
    reduction do (staggered: at each trip, a head's key tiles at different pairs)."""
    lines = [line for line in source.splitlines()
             if re.match(r"(constexpr (int|bool) |__device__ __forceinline__ int )", line)]
    raster = re.search(r"^__device__ __forceinline__ void tile_origin\(.*?^}$", source,
                       re.M | re.S)
    assert raster is not None
    return "\n".join([
        "#include <algorithm>", "#include <cstdio>", "#include <vector>",
        "#define __device__", "#define __forceinline__ inline",
        f"constexpr bool HEAVIEST_FIRST = {str(heaviest_first).lower()};",
        f"constexpr bool STAGGERED = {str(stagger).lower()};",
        "using std::max; using std::min;", *lines, raster.group(0), r"""
int main() {
  std::vector<int> tiles(TILES_KV * TILES_BATCH * TILES_HEADS, 0);
  int last_trips = 1 << 30;
  for (int tile = 0; tile < TILES_KV * TILES_BATCH * TILES_HEADS; ++tile) {
    int kv0, batch0, heads0;
    tile_origin(tile, kv0, batch0, heads0);
    if (tiles[(kv0 / TILE_KV * TILES_BATCH + batch0) * TILES_HEADS + heads0]++) {
      puts("tile twice"); return 1;
    }
    const int trips = trips_per_head(kv0);
    if (HEAVIEST_FIRST && trips > last_trips) { puts("lighter tile first"); return 1; }
    last_trips = trips;
  }
  if (STAGGERED && !CAUSAL)
    for (int trip = 0; trip < GROUP * Q_TILES; ++trip)
      for (int j = 1; j < min(KV_TILES, GROUP * Q_TILES); ++j)
        for (int i = 0; i < j; ++i)
          if (trip_head(trip, j * TILE_KV, 0) == trip_head(trip, i * TILE_KV, 0)
              && trip_q0(trip, j * TILE_KV) == trip_q0(trip, i * TILE_KV)) {
            puts("two key tiles at one pair"); return 1;
          }
  std::vector<int> seen(KV_TILES * HEADS * Q_TILES, 0), adders(HEADS * Q_TILES, 0);
  for (int heads0 = 0; heads0 < KV_HEADS; ++heads0)
    for (int j = 0; j < KV_TILES; ++j) {
      const int kv0 = j * TILE_KV, trips = GROUP * max(0, trips_per_head(kv0));
      for (int trip = 0; trip < trips; ++trip) {
        const int head = trip_head(trip, kv0, heads0), q0 = trip_q0(trip, kv0);
        if (head / GROUP != heads0 || q0 % TILE_Q || q0 >= SEQ_Q) { puts("bad trip"); return 1; }
        if (seen[(j * HEADS + head) * Q_TILES + q0 / TILE_Q]++ == 0)
          adders[head * Q_TILES + q0 / TILE_Q]++;
      }
    }
  for (int j = 0; j < KV_TILES; ++j)
    for (int h = 0; h < HEADS; ++h)
      for (int t = 0; t < Q_TILES; ++t) {
        const bool attended = !CAUSAL || (t + 1) * TILE_Q - 1 >= j * TILE_KV;
        if (seen[(j * HEADS + h) * Q_TILES + t] != (attended ? 1 : 0)) { puts("pair"); return 1; }
      }
  for (int h = 0; h < HEADS; ++h)
    for (int t = 0; t < Q_TILES; ++t)
      if (adders[h * Q_TILES + t] != q_contributors(t)) { puts("contributors"); return 1; }
  puts("ok");
  return 0;
}
"""])


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
@pytest.mark.parametrize("stagger", [False, True])
@pytest.mark.parametrize("params", [
    BASE,
    {**BASE, "seq_q": 300, "seq_kv": 700},
    {**BASE, "seq_q": 700, "seq_kv": 300, "kv_heads": 8},
    {**BASE, "causal": False, "seq_q": 200, "seq_kv": 130},
])
def test_raster_and_trips_visit_each_tile_and_attended_pair_once(
        params: dict, stagger: bool, tmp_path: Path) -> None:
    """... and, causal with ``raster_heaviest_first``, no tile before a heavier one; with
    ``raster_stagger`` each key tile's walk starts elsewhere and still sees every pair once."""
    spec = parse_spec("attention_backward", params)
    for sample in sample_schedules(spec, H200, 1, seed=4):
        heaviest_first = spec.causal
        sprogram = plan_sprogram(spec, H200, {**sample.choices, "raster_stagger": stagger,
                                              "raster_heaviest_first": heaviest_first})
        program = tmp_path / f"trips_{sprogram.hash[:8]}.cpp"
        program.write_text(_host_program(render(sprogram, spec, H200).source, heaviest_first,
                                         stagger))
        binary = tmp_path / program.stem
        subprocess.run(["g++", "-std=c++17", "-O1", "-o", str(binary), str(program)],
                       check=True, capture_output=True)
        result = subprocess.run([str(binary)], capture_output=True, text=True)
        assert result.stdout.strip() == "ok", (sprogram.choices, result.stdout)


def test_launch_contract_holds_the_spec_s_tensors_and_zeroed_workspaces() -> None:
    spec = parse_spec("attention_backward", BASE)
    sprogram = next(sample_schedules(spec, H200, 1, seed=1))
    artifact = render(sprogram, spec, H200)
    shapes = {t.name: t.shape for t in spec.tensors()}
    tensors = {a.name: a for a in artifact.args if isinstance(a, TensorArg)}
    assert {n: tensors[n].shape for n in ("dk", "dv", "dq")} == {
        n: shapes[n] for n in ("dk", "dv", "dq")}
    assert all(tensors[n].role == "output" for n in ("dk", "dv", "dq"))
    maps = {a.tensor for a in artifact.args if a.kind == "tensor_map"}
    assert maps == {"q", "k", "v", "o", "do", "lse"}
    workspaces = {a.name: a.bytes for a in artifact.args if isinstance(a, WorkspaceArg)}
    q_tiles = -(-BASE["seq_q"] // sprogram.tile["q"])
    assert workspaces == {
        "dq_accum": BASE["batch"] * BASE["heads"] * BASE["seq_q"] * BASE["head_dim"] * 4,
        "dq_count": BASE["batch"] * BASE["heads"] * q_tiles * 4}
    # The kernel's parameters follow the arguments' order.
    names = re.findall(r"(\w+)(?:,|\))", artifact.source.split(artifact.entry + "(", 1)[1]
                       .split("{", 1)[0])
    assert names == [a.name for a in artifact.args]


@pytest.mark.parametrize(("change", "device", "reason"), [
    ({}, "a100", "TMA targets"),
    ({"seq_q": 510}, "h200", "multiple of 4"),
])
def test_what_is_not_generated_says_why(change: dict, device: str, reason: str) -> None:
    spec = parse_spec("attention_backward", {**BASE, **change})
    target = get_device(device)
    from scheduler_search.space import ScheduleSpace

    space = ScheduleSpace(spec, target)
    candidates, _ = space.enumerate()
    problems = {unsupported(c.sprogram, target) for c in candidates[:20]}
    assert problems and all(p and reason in p for p in problems), problems


def test_consumers_that_meet_every_trip_never_take_turns() -> None:
    """dSᵀ is staged by every consumer before any reads it: a consumer waiting for its turn
    on the tensor cores there would deadlock, so no generated schedule has turns (and two
    consumers still split a key tile where the registers allow)."""
    from codegen import feasibility
    from codegen.pipeline.structure import PipelineStructure
    from scheduler_search.space import ScheduleSpace

    spec = parse_spec("attention_backward", {**BASE, "head_dim": 64})
    space = ScheduleSpace(spec, H200, feasibility(spec.op, H200))
    candidates, _ = space.enumerate()
    structures = [PipelineStructure(c.sprogram) for c in candidates]
    assert structures and not any(s.turns for s in structures)
    assert {s.consumers for s in structures} == {1, 2}


def test_a_deterministic_dq_adds_in_key_tile_order() -> None:
    """Deterministic: each tile's dq adds wait (acquire) for the count of the key tiles
    before it; otherwise no tile waits."""
    waits = {}
    for deterministic in (False, True):
        spec = parse_spec("attention_backward", {**BASE, "deterministic": deterministic})
        for sprogram in sample_schedules(spec, H200, 2, seed=5):
            source = render(sprogram, spec, H200).source
            waits[deterministic] = "ld_acquire_u32(count) < before" in source
            assert ("kv0 / TILE_KV * DQ_PIECES" in source) == deterministic
    assert waits == {False: False, True: True}


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_interleaved_kernels_compile_clean_and_issue_s_and_dp_first() -> None:
    """``interleave``: the trip's S and dP products issued back to back, D summed under
    them, each product waited for only where its result is read (dP still in flight
    during the exponentials), dS packed apart from P (dV's product may still read P);
    at head_dim 64 and 64 queries a trip it compiles without spills or serialised wgmma.
    Where S, dP, dK and dV would not fit the registers together it is refused, saying
    why."""
    from codegen import feasibility
    from codegen.pipeline.pipelined import group_waits
    from codegen.pipeline.structure import PipelineStructure
    from scheduler_search.space import ScheduleSpace

    spec = parse_spec("attention_backward", {**BASE, "head_dim": 64, "layout": "bhsd"})
    space = ScheduleSpace(spec, H200, feasibility(spec.op, H200))
    candidates, _ = space.enumerate()
    interleaved = [c.sprogram for c in candidates if c.sprogram.order == "interleave"]
    picked = {(sp.tile["kv"], sp.tile["q"], sp.roles.consumer_warpgroups): sp
              for sp in interleaved}
    assert sorted(picked) == [(64, 64, 1), (128, 64, 2)]
    for sprogram in picked.values():
        structure = PipelineStructure(sprogram)
        loop = [i.stask for i in structure.compute_stream(structure.consumer_roles[0])
                if i.phase == "loop"]
        assert loop[:3] == ["mma_s", "mma_dp", "delta"], loop
        waits = {(w.mma, w.waiter): w.pending for w in group_waits(structure)}
        assert waits[("mma_s", "softmax_p")] == 1 and waits[("mma_dp", "grad_s")] == 1
    sources = [render(sp, spec, H200).source for sp in picked.values()]
    assert all("ds[mi][i] = pack" in source for source in sources)
    assert_compile_clean(sources)
    wide = parse_spec("attention_backward", BASE)
    refused = plan_sprogram(wide, H200, {**next(iter(picked.values())).choices,
                                         "tile_kv": 64, "tile_q": 64})
    assert "spill" in (unsupported(refused, H200) or "")


def _warp_program(add: str) -> str:
    """A host program that runs the kernel's text adding one dq piece, ``add``, on 32
    threads as the lanes of warp 1 (the shuffle a barrier-backed exchange, the reduction
    a locked add), every accumulator holding the code of its (row, column) as the
    wgmma fragment places it; it prints ``ok`` when every element of the warp's 16 rows
    of the piece got exactly its own value, rows past the sequence none."""
    return "\n".join([
        "#include <barrier>", "#include <cstdio>", "#include <mutex>", "#include <thread>",
        "#include <vector>",
        "constexpr int HEAD_DIM = 128, SEQ_Q = 90, ROWS = 96, q_first = 0, qb = 1, db = 1,",
        "              warp = 1;",
        "std::vector<float> dq(ROWS * HEAD_DIM, 0.0f); std::vector<int> adds(ROWS * HEAD_DIM);",
        "std::mutex lock; std::barrier<> step(32); float slots[32];",
        "thread_local int lane;",
        "float __shfl_xor_sync(unsigned, float v, int m) {",
        "  slots[lane] = v; step.arrive_and_wait(); const float got = slots[lane ^ m];",
        "  step.arrive_and_wait(); return got; }",
        "void add(float* at, float v) { const long i = at - dq.data(); dq[i] += v; adds[i]++; }",
        "void red_add_f32x2(float* at, float x, float y) {",
        "  std::lock_guard<std::mutex> g(lock); add(at, x); add(at + 1, y); }",
        "void red_add_f32x4(float* at, float x, float y, float z, float w) {",
        "  std::lock_guard<std::mutex> g(lock); add(at, x); add(at + 1, y); add(at + 2, z);",
        "  add(at + 3, w); }",
        "float code(int row, int col) { return row * 1000.0f + col; }",
        "void run(int me) {",
        "  lane = me; float* dq_rows = dq.data(); float dq_acc[32];",
        "  for (int g = 0; g < 8; ++g) for (int h = 0; h < 2; ++h) for (int e = 0; e < 2; ++e)",
        "    dq_acc[4 * g + 2 * h + e] = code(q_first + qb * 64 + warp * 16 + h * 8 + (lane >> 2),",
        "                                     db * 64 + g * 8 + (lane & 3) * 2 + e);",
        add,
        "}",
        "int main() {",
        "  std::vector<std::thread> lanes;",
        "  for (int i = 0; i < 32; ++i) lanes.emplace_back(run, i);",
        "  for (auto& t : lanes) t.join();",
        "  for (int row = 0; row < ROWS; ++row) for (int col = 0; col < HEAD_DIM; ++col) {",
        "    const int i = row * HEAD_DIM + col;",
        "    const bool mine = row >= 80 && row < 96 && col >= 64;",
        "    if (adds[i] != (mine && row < SEQ_Q) || (adds[i] && dq[i] != code(row, col))) {",
        "      printf(\"row %d col %d: %d adds, %f\\n\", row, col, adds[i], dq[i]); return 1; }",
        "  }",
        "  puts(\"ok\"); return 0; }",
    ])


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
@pytest.mark.parametrize("order", ["serial", "interleave"])
def test_a_piece_of_dq_lands_once_in_each_element(order: str, tmp_path: Path) -> None:
    """The text that adds a 64 x 64 piece of dq, run as a warp: four columns a lane from
    neighbouring lanes' swapped pairs (serial), or each lane's own pairs (interleave),
    every element of the warp's rows once, rows past the sequence never (the warp's
    rows are 80..95; the sequence ends at 90)."""
    from codegen.kernels.attention_backward_math import BackwardMath
    from codegen.pipeline import Code

    code = Code()
    (BackwardMath._add_quads if order == "serial" else BackwardMath._add_pairs)(code)
    program = tmp_path / f"piece_{order}.cpp"
    program.write_text(_warp_program(code.text()))
    binary = tmp_path / program.stem
    subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", "-o", str(binary), str(program)],
                   check=True, capture_output=True)
    result = subprocess.run([str(binary)], capture_output=True, text=True)
    assert result.stdout.strip() == "ok", result.stdout
