"""The sTask-graph IR: graphs built by each operator, Propagate, dependencies, trip counts.

Expected tile shapes are derived from the tensor expressions (docs/architecture.md, "The model", and
the module docstrings of ``scheduler_search/ops``): an sTask's output tile binds the axes it
shares with its consumers, reduction axes take their step, untiled axes their whole extent.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_search.hardware import UnitKind
from scheduler_search.ir import (
    PropagateError,
    STask,
    STaskGraph,
    STaskKind,
    Tensor,
    TensorAccess,
    TilePlan,
    propagate,
)
from scheduler_search.ops import (
    AttentionSpec,
    GemmSpec,
    Mamba2ChunkScanSpec,
    Mamba2ChunkStateSpec,
    OperatorSpec,
)
from scheduler_search.ops.suites import REFERENCE_WORKLOADS

MAMBA2 = REFERENCE_WORKLOADS["mamba2_chunk_scan"]

#: One (spec, tile) per operator; the tiles are deliberately not all powers of two.
CASES: dict[str, tuple[OperatorSpec, dict[str, int]]] = {
    "gemm_kn": (GemmSpec(m=4000, n=6000, k=2000), {"m": 128, "n": 256, "k": 64}),
    "gemm_nk": (GemmSpec(m=4000, n=6000, k=2000, b_layout="nk"), {"m": 128, "n": 256, "k": 64}),
    "attention": (
        AttentionSpec(
            batch=8, heads=32, kv_heads=8, seq_q=3000, seq_kv=3000, head_dim=128, causal=True
        ),
        {"q": 128, "kv": 176},
    ),
    "chunk_scan": (Mamba2ChunkScanSpec(**MAMBA2), {"l": 64, "p": 32, "s": 16}),
    "chunk_state": (Mamba2ChunkStateSpec(**MAMBA2), {"p": 32, "n": 64, "l": 128}),
}


def graph_of(case: str) -> STaskGraph:
    spec, tile = CASES[case]
    return spec.build_graph(tile)


# --- the graphs every operator builds (one shared conformance suite) ---------------------


@pytest.mark.parametrize("case", CASES)
def test_graph_is_well_formed(case: str) -> None:
    graph = graph_of(case)
    names = graph.names()
    assert len(set(names)) == len(names), "sTask names are unique"
    for task in graph.stasks:
        assert task.units, f"{task.name} can run on some sEU"
        assert all(isinstance(u, UnitKind) for u in task.units)
        assert task.phase in ("prologue", "loop", "epilogue")
        for access in (task.output, *task.inputs):
            assert access.tensor in graph.tensors, f"{task.name} touches {access.tensor}"
            for axis in access.axes:
                assert axis in graph.extents, f"{task.name}: axis {axis} has an extent"
    # Every staged tensor read is written by some sTask; globals are read or written.
    written = {t.output.tensor for t in graph.stasks}
    for task in graph.stasks:
        for access in task.inputs:
            space = graph.tensors[access.tensor].space
            assert (space == "global") != (access.tensor in written), (task.name, access)
    # Exactly one store of a global output, in the epilogue.
    stores = [t for t in graph.stasks if t.kind is STaskKind.STORE]
    assert len(stores) == 1 and stores[0].phase == "epilogue"
    assert graph.tensors[stores[0].output.tensor].space == "global"
    assert set(graph.spatial_axes).isdisjoint(graph.reduction_axes)


@pytest.mark.parametrize("case", CASES)
def test_graph_is_in_topological_order(case: str) -> None:
    # A producer precedes its consumer unless the value is carried from the previous
    # iteration (a loop sTask reading what a later loop sTask writes).
    graph = graph_of(case)
    for task, distances in graph.dependencies().items():
        for producer, distance in distances:
            before = graph.names().index(producer) < graph.names().index(task)
            assert before == (distance == 0), (task, producer, distance)


@pytest.mark.parametrize("case", CASES)
def test_phases_are_ordered_prologue_loop_epilogue(case: str) -> None:
    phases = [t.phase for t in graph_of(case).stasks]
    rank = {"prologue": 0, "loop": 1, "epilogue": 2}
    # Loads of the prologue may be listed next to the loop's loads, but nothing of the
    # epilogue precedes a loop sTask.
    last_loop = max(i for i, p in enumerate(phases) if p == "loop")
    assert all(rank[p] == 2 for p in phases[last_loop + 1 :])
    assert "epilogue" not in phases[:last_loop]


def test_gemm_graph_has_design_stasks() -> None:
    graph = graph_of("gemm_kn")
    assert graph.names() == ("load_a", "load_b", "mma", "store")
    assert graph.stask("mma").kind is STaskKind.MMA
    assert graph.stask("mma").units == (UnitKind.TENSOR_CORE,)
    assert graph.spatial_axes == ("m", "n") and graph.reduction_axes == ("k",)
    with pytest.raises(KeyError, match="softmax"):
        graph.stask("softmax")


def test_attention_graph_has_design_stasks() -> None:
    names = graph_of("attention").names()
    for name in (
        "load_q",
        "load_k",
        "load_v",
        "mma_qk",
        "softmax_max",
        "softmax_exp2",
        "softmax_sum",
        "rescale",
        "mma_pv",
        "store",
    ):
        assert name in names
    graph = graph_of("attention")
    assert UnitKind.SFU in graph.stask("softmax_exp2").units
    assert graph.stask("load_q").phase == "prologue"
    assert graph.causal_pairs == (("q", "kv"),)
    non_causal = AttentionSpec(
        batch=1, heads=1, kv_heads=1, seq_q=128, seq_kv=128, head_dim=64
    ).build_graph({"q": 64, "kv": 64})
    assert non_causal.causal_pairs == ()


def test_chunk_scan_graph_has_design_stasks() -> None:
    names = graph_of("chunk_scan").names()
    for name in (
        "load_cb",
        "load_dA",
        "load_dt",
        "decay",
        "load_x",
        "load_c",
        "load_state",
        "store",
    ):
        assert name in names
    assert sum(1 for t in graph_of("chunk_scan").stasks if t.kind is STaskKind.MMA) == 2


@pytest.mark.parametrize("case", ["gemm_kn", "gemm_nk", "chunk_scan", "chunk_state"])
@pytest.mark.parametrize("unit", [UnitKind.TMA, UnitKind.LSU])
def test_tile_loads_run_on_tma_or_the_sm80_copy_path(case: str, unit: UnitKind) -> None:
    loads = [t for t in graph_of(case).stasks if t.kind is STaskKind.LOAD]
    assert loads
    assert any(unit in t.units for t in loads)


# --- Propagate on each operator ------------------------------------------------------------


def test_propagate_gemm_kn() -> None:
    plan = propagate(graph_of("gemm_kn"))
    assert plan.tensor_tiles == {"a_s": (128, 64), "b_s": (64, 256), "acc": (128, 256)}
    assert plan.stask_extents["mma"] == {"m": 128, "n": 256, "k": 64}
    assert plan.stask_extents["load_a"] == {"m": 128, "k": 64}
    assert plan.stask_extents["store"] == {"m": 128, "n": 256}
    assert plan.points("mma") == 128 * 256 * 64
    assert plan.tile_elements("acc") == 128 * 256


def test_propagate_gemm_nk() -> None:
    plan = propagate(graph_of("gemm_nk"))
    assert plan.tensor_tiles == {"a_s": (128, 64), "b_s": (256, 64), "acc": (128, 256)}
    assert plan.stask_extents["load_b"] == {"n": 256, "k": 64}


def test_propagate_gemm_with_an_explicit_output_tile() -> None:
    plan = propagate(graph_of("gemm_kn"), {"m": 64, "n": 128})
    assert plan.tensor_tiles == {"a_s": (64, 64), "b_s": (64, 128), "acc": (64, 128)}


def test_propagate_gemm_only_allocates_staged_tensors() -> None:
    plan = propagate(graph_of("gemm_kn"))
    assert set(plan.tensor_tiles).isdisjoint({"a", "b", "c"})
    assert list(plan.stask_extents) == ["load_a", "load_b", "mma", "store"]


def test_propagate_attention() -> None:
    plan = propagate(graph_of("attention"))
    # q tile 128, kv tile 176, head_dim 128 untiled (taken whole).
    assert plan.tensor_tiles == {
        "q_s": (128, 128),
        "k_s": (176, 128),
        "v_s": (176, 128),
        "s": (128, 176),
        "p": (128, 176),
        "m_row": (128,),
        "l_row": (128,),
        "o_acc": (128, 128),
        "o_r": (128, 128),
    }
    assert plan.stask_extents["mma_qk"] == {"q": 128, "kv": 176, "d": 128}
    assert plan.stask_extents["mma_pv"] == {"q": 128, "d": 128, "kv": 176}
    assert plan.stask_extents["softmax_max"] == {"q": 128, "kv": 176}
    assert plan.stask_extents["rescale"] == {"q": 128, "d": 128}


def test_propagate_attention_head_dim_64() -> None:
    spec = AttentionSpec(batch=8, heads=16, kv_heads=16, seq_q=4096, seq_kv=4096, head_dim=64)
    plan = propagate(spec.build_graph({"q": 128, "kv": 128}))
    assert plan.tensor_tiles["q_s"] == (128, 64)
    assert plan.tensor_tiles["k_s"] == (128, 64)
    assert plan.tensor_tiles["o_acc"] == (128, 64)


def test_propagate_chunk_scan() -> None:
    # out[l,p] over a tile of l=64 rows and p=32 columns; the intra-chunk sum walks s in
    # steps of 16; the state term contracts the whole dstate (n=128) once, in the prologue.
    plan = propagate(graph_of("chunk_scan"))
    assert plan.tensor_tiles == {
        "c_s": (64, 128),  # c[l,n]
        "st_s": (32, 128),  # states[p,n]
        "dAl_s": (64,),  # dA[l]
        "acc": (64, 32),  # out[l,p]
        "cb_s": (64, 16),  # cb[l,s]
        "dt_s": (16,),  # dt[s]
        "dAs_s": (16,),  # dA[s]
        "x_s": (16, 32),  # x[s,p]
        "e": (64, 16),  # exp(dA[l] - dA[s])
        "pm": (64, 16),  # masked cb·e·dt
    }
    assert plan.stask_extents["mma_state"] == {"l": 64, "p": 32, "n": 128}
    assert plan.stask_extents["mma_x"] == {"l": 64, "p": 32, "s": 16}


def test_propagate_chunk_state() -> None:
    # states[p,n] over a tile of p=32, n=64; the sum walks l in steps of 128.
    plan = propagate(graph_of("chunk_state"))
    assert plan.tensor_tiles == {
        "x_s": (128, 32),  # x[l,p]
        "b_s": (128, 64),  # b[l,n]
        "dt_s": (128,),
        "dA_s": (128,),
        "w": (128,),  # exp(dA[L-1] - dA[l]) dt[l]
        "xw": (128, 32),
        "acc": (32, 64),
    }
    assert plan.stask_extents["mma"] == {"p": 32, "n": 64, "l": 128}


@pytest.mark.parametrize("case", CASES)
def test_propagate_covers_every_stask_and_staged_tensor(case: str) -> None:
    graph = graph_of(case)
    plan = propagate(graph)
    assert tuple(plan.stask_extents) == graph.names()
    staged = {name for name, t in graph.tensors.items() if t.space != "global"}
    assert set(plan.tensor_tiles) == staged
    for task in graph.stasks:
        assert set(plan.stask_extents[task.name]) == set(task.axes)
        for axis in graph.reduction_axes:
            if axis in task.axes:
                assert plan.stask_extents[task.name][axis] == graph.step(axis)


@pytest.mark.parametrize("case", CASES)
def test_propagate_is_deterministic(case: str) -> None:
    assert propagate(graph_of(case)) == propagate(graph_of(case))


# --- inconsistent hand-built graphs ----------------------------------------------------------

COPY = (UnitKind.TMA,)
TC = (UnitKind.TENSOR_CORE,)


def acc(text: str) -> TensorAccess:
    name, _, rest = text.partition("[")
    return TensorAccess(name, tuple(a for a in rest.rstrip("]").split(",") if a))


def task(name: str, kind: STaskKind, output: str, *inputs: str, **kw: Any) -> STask:
    units = TC if kind is STaskKind.MMA else COPY
    return STask(name, kind, acc(output), tuple(acc(i) for i in inputs), units, **kw)


def hand_graph(*stasks: STask, spaces: str) -> STaskGraph:
    """A GEMM-like graph: ``spaces`` is ``"a:global a_s:shared ..."``."""
    pairs = (item.split(":") for item in spaces.split())
    return STaskGraph(
        op="hand",
        stasks=stasks,
        tensors={name: Tensor(name, "float16", space) for name, space in pairs},  # type: ignore[arg-type]
        extents={"m": 1024, "n": 1024, "k": 1024},
        tile={"m": 128, "n": 256, "k": 64},
        spatial_axes=("m", "n"),
        reduction_axes=("k",),
    )


LOAD, MMA, EW, STORE = STaskKind.LOAD, STaskKind.MMA, STaskKind.ELEMENTWISE, STaskKind.STORE


def test_hand_built_consistent_graph_propagates() -> None:
    graph = hand_graph(
        task("load_a", LOAD, "a_s[m,k]", "a[m,k]"),
        task("load_b", LOAD, "b_s[k,n]", "b[k,n]"),
        task("mma", MMA, "acc[m,n]", "a_s[m,k]", "b_s[k,n]"),
        task("store", STORE, "c[m,n]", "acc[m,n]", phase="epilogue"),
        spaces="a:global b:global c:global a_s:shared b_s:shared acc:register",
    )
    plan = propagate(graph)
    assert plan.tensor_tiles == {"a_s": (128, 64), "b_s": (64, 256), "acc": (128, 256)}


def test_shared_tensor_read_with_two_tile_shapes_is_rejected() -> None:
    # a_s is read as an (m, k) tile by one sTask and as an (n, k) tile by another:
    # 128 x 64 and 256 x 64 cannot both be its shape.
    graph = hand_graph(
        task("load_a", LOAD, "a_s[m,k]", "a[m,k]"),
        task("mma", MMA, "acc[m,n]", "a_s[m,k]", "a_s[n,k]"),
        task("store", STORE, "c[m,n]", "acc[m,n]", phase="epilogue"),
        spaces="a:global c:global a_s:shared acc:register",
    )
    with pytest.raises(PropagateError, match="a_s"):
        propagate(graph)


def test_reduction_axis_bound_to_two_extents_is_rejected() -> None:
    # The consumer reads r_s as an (m, n) tile, so its producer's k axis would be 256
    # while the loop steps k by 64.
    graph = hand_graph(
        task("load_r", LOAD, "r_s[m,k]", "r[m,k]"),
        task("use", EW, "acc[m,n]", "r_s[m,n]"),
        task("store", STORE, "c[m,n]", "acc[m,n]", phase="epilogue"),
        spaces="r:global c:global r_s:shared acc:register",
    )
    with pytest.raises(PropagateError, match=r"load_r.*\bk\b"):
        propagate(graph)


def test_spatial_axis_bound_to_two_extents_is_rejected() -> None:
    # The consumer reads x_s transposed (n, m) = (256, 128); the producer writes x_s[m,n]
    # and would compute an m extent of 256 in a tile whose m is 128.
    graph = hand_graph(
        task("load_x", LOAD, "x_s[m,n]", "x[m,n]"),
        task("use", EW, "acc[m,n]", "x_s[n,m]"),
        task("store", STORE, "c[m,n]", "acc[m,n]", phase="epilogue"),
        spaces="x:global c:global x_s:shared acc:register",
    )
    with pytest.raises(PropagateError, match="load_x"):
        propagate(graph)


def test_tensor_accessed_with_two_ranks_is_a_propagate_error() -> None:
    graph = hand_graph(
        task("load_x", LOAD, "x_s[m,k]", "x[m,k]"),
        task("use", EW, "acc[m,n]", "x_s[m]"),
        task("store", STORE, "c[m,n]", "acc[m,n]", phase="epilogue"),
        spaces="x:global c:global x_s:shared acc:register",
    )
    with pytest.raises(PropagateError, match="x_s"):
        propagate(graph)


def test_global_tensors_may_be_indexed_by_different_axes() -> None:
    # dA_cumsum[l] and dA_cumsum[s] in the chunk scan: globals are not allocated per tile.
    graph = hand_graph(
        task("load_l", LOAD, "x_s[m,k]", "x[m,k]"),
        task("load_r", LOAD, "y_s[n,k]", "x[n,k]"),
        task("mma", MMA, "acc[m,n]", "x_s[m,k]", "y_s[n,k]"),
        task("store", STORE, "c[m,n]", "acc[m,n]", phase="epilogue"),
        spaces="x:global c:global x_s:shared y_s:shared acc:register",
    )
    assert propagate(graph).tensor_tiles["y_s"] == (256, 64)


def test_tile_plan_counts_points_and_elements() -> None:
    plan = TilePlan(
        tensor_tiles={"t": (4, 8, 2), "row": (16,)},
        stask_extents={"x": {"m": 3, "n": 5}, "empty": {}},
    )
    assert plan.tile_elements("t") == 64
    assert plan.tile_elements("row") == 16
    assert plan.points("x") == 15
    assert plan.points("empty") == 1


# --- dependencies ----------------------------------------------------------------------------


def test_attention_dependencies() -> None:
    deps = graph_of("attention").dependencies()
    assert deps == {
        "load_q": (),
        "load_k": (),
        "load_v": (),
        "mma_qk": (("load_q", 0), ("load_k", 0)),
        "softmax_max": (("mma_qk", 0),),
        "softmax_exp2": (("mma_qk", 0), ("softmax_max", 0)),
        "softmax_sum": (("softmax_exp2", 0), ("softmax_max", 0)),
        # o_acc is carried: rescale in iteration i scales what mma_pv wrote in i - 1.
        "rescale": (("mma_pv", 1), ("softmax_max", 0)),
        "mma_pv": (("softmax_exp2", 0), ("load_v", 0), ("rescale", 0)),
        "normalize": (("mma_pv", 0), ("softmax_sum", 0)),
        "store": (("normalize", 0),),
    }


def test_gemm_dependencies() -> None:
    assert graph_of("gemm_kn").dependencies() == {
        "load_a": (),
        "load_b": (),
        "mma": (("load_a", 0), ("load_b", 0)),
        "store": (("mma", 0),),
    }


def test_chunk_state_dependencies() -> None:
    assert graph_of("chunk_state").dependencies() == {
        "load_x": (),
        "load_b": (),
        "load_dt": (),
        "load_dA": (),
        "decay": (("load_dA", 0), ("load_dt", 0)),
        "scale_x": (("load_x", 0), ("decay", 0)),
        "mma": (("scale_x", 0), ("load_b", 0)),
        "store": (("mma", 0),),
    }


def test_chunk_scan_dependencies_cross_from_prologue_to_loop() -> None:
    deps = graph_of("chunk_scan").dependencies()
    assert deps["mma_state"] == (("load_c", 0), ("load_state", 0))
    assert deps["decay_out"] == (("mma_state", 0), ("load_dA_l", 0))
    assert deps["decay"] == (("load_dA_l", 0), ("load_dA", 0))
    assert deps["scale_cb"] == (("load_cb", 0), ("decay", 0), ("load_dt", 0))
    assert ("load_x", 0) in deps["mma_x"] and ("scale_cb", 0) in deps["mma_x"]
    assert deps["skip"] == (("mma_x", 0),) and deps["store"] == (("skip", 0),)


def test_loop_carried_dependency_is_not_carried_out_of_the_epilogue() -> None:
    # An epilogue sTask reading a tensor written only later is not a loop-carried read.
    graph = hand_graph(
        task("load_a", LOAD, "a_s[m,k]", "a[m,k]"),
        task("early", EW, "t[m,n]", "u[m,n]", phase="epilogue"),
        task("late", EW, "u[m,n]", "a_s[m,k]", phase="epilogue"),
        task("store", STORE, "c[m,n]", "t[m,n]", phase="epilogue"),
        spaces="a:global c:global a_s:shared t:register u:register",
    )
    deps = graph.dependencies()
    assert deps["early"] == ()
    assert deps["late"] == (("load_a", 0),)


def test_duplicate_dependencies_are_listed_once() -> None:
    graph = hand_graph(
        task("load_a", LOAD, "a_s[m,k]", "a[m,k]"),
        task("square", MMA, "acc[m,n]", "a_s[m,k]", "a_s[n,k]"),
        task("store", STORE, "c[m,n]", "acc[m,n]", phase="epilogue"),
        spaces="a:global c:global a_s:shared acc:register",
    )
    assert graph.dependencies()["square"] == (("load_a", 0),)


# --- loop trips and tile counts ----------------------------------------------------------------


def test_gemm_trips_and_tiles_round_up_partial_tiles() -> None:
    graph = graph_of("gemm_kn")  # 4000 x 6000 x 2000 with 128 x 256 x 64
    assert graph.loop_trips() == 32  # ceil(2000 / 64)
    assert graph.tile_count() == 32 * 24  # ceil(4000 / 128) * ceil(6000 / 256)


@pytest.mark.parametrize(
    ("shape", "tile", "trips", "tiles"),
    [
        ((4096, 4096, 4096), (128, 256, 64), 64, 32 * 16),
        ((128, 8192, 8192), (128, 128, 64), 128, 64),
        ((1, 8, 8), (128, 256, 64), 1, 1),
        ((129, 264, 72), (128, 256, 64), 2, 4),
    ],
)
def test_gemm_trips_and_tiles(
    shape: tuple[int, int, int], tile: tuple[int, int, int], trips: int, tiles: int
) -> None:
    m, n, k = shape
    graph = GemmSpec(m=m, n=n, k=k).build_graph(dict(zip("mnk", tile, strict=True)))
    assert graph.loop_trips() == trips
    assert graph.tile_count() == tiles


def test_untiled_reduction_axis_is_one_trip() -> None:
    graph = GemmSpec(m=256, n=256, k=512).build_graph({"m": 128, "n": 128})
    assert graph.step("k") == 512
    assert graph.loop_trips() == 1
    assert graph.tile_count() == 4


def test_attention_trips_and_tiles_include_batch_and_heads() -> None:
    graph = graph_of("attention")  # batch 8, heads 32, seq 3000, q 128, kv 176
    assert graph.loop_trips() == 18  # ceil(3000 / 176)
    assert graph.tile_count() == 24 * 8 * 32  # ceil(3000 / 128) q tiles per (batch, head)
    assert graph.step("d") == 128


def test_chunk_scan_trips_and_tiles_include_chunks() -> None:
    graph = graph_of("chunk_scan")  # batch 8, seqlen 4096 / chunk 256 = 16 chunks, 80 heads
    assert graph.loop_trips() == 256 // 16
    assert graph.tile_count() == (256 // 64) * (64 // 32) * 8 * 16 * 80


def test_chunk_state_trips_and_tiles_include_chunks() -> None:
    graph = graph_of("chunk_state")
    assert graph.loop_trips() == 256 // 128
    assert graph.tile_count() == (64 // 32) * (128 // 64) * 8 * 16 * 80


def test_phase_tasks_partition_the_graph() -> None:
    graph = graph_of("attention")
    prologue = graph.phase_tasks("prologue")
    loop = graph.phase_tasks("loop")
    epilogue = graph.phase_tasks("epilogue")
    assert [t.name for t in prologue] == ["load_q"]
    assert [t.name for t in epilogue] == ["normalize", "store"]
    assert len(prologue) + len(loop) + len(epilogue) == len(graph.stasks)


# --- sTask basics ------------------------------------------------------------------------------


def test_stask_axes_are_output_axes_then_new_input_axes() -> None:
    mma = task("mma", MMA, "acc[m,n]", "a_s[m,k]", "b_s[k,n]")
    assert mma.axes == ("m", "n", "k")
    assert mma.reads("a_s") and mma.reads("b_s")
    assert not mma.reads("acc")
    assert str(mma.output) == "acc[m,n]"


def test_stask_kinds_and_unit_kinds_are_strings() -> None:
    assert STaskKind("mma") is STaskKind.MMA
    assert {k.value for k in STaskKind} == {"load", "mma", "elementwise", "reduce", "store"}
    assert UnitKind("tensor_core") is UnitKind.TENSOR_CORE
