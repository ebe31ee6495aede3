"""Generated Mamba2 chunk state and chunk scan kernels on a real GPU: correct against the
workers' fp32 reference (poisoned outputs, seeded random inputs) on every shape of the
benchmark suite, on heads sharing B and C (ngroups 8), fp16 and bf16, an odd number of chunks,
chunk sizes other than the suite's, with each way of loading dt and dA, and with the loop's
wgmma waited for each trip or kept in flight; chunk state's states in fp32 and, as
``states_in_fp32=False`` asks, in the inputs' dtype, each stored both ways; the chunk state
in thread-block clusters of 2 and 4 blocks multicasting B, and with rings deeper than a
tile's trips; and the chunk state fused with the state passing (the states entering each
chunk and the final state, from zeros or given initial states).

Run on an H200 with ``pytest tests/codegen -m gpu``; skipped where CuPy sees no GPU. Every
kernel of the module is compiled and checked in one batch; each test reads its own result.
"""

from __future__ import annotations

from typing import Any

import pytest
from gpu import cuda_device_visible
from kernel_checks import assert_correct, check_kernels
from schedule_samples import sample_schedules

from codegen import feasibility
from scheduler_search.hardware import get_device
from scheduler_search.ops import OperatorSpec, parse_spec
from scheduler_search.space import ScheduleSpace
from scheduler_search.space.designs import DESIGNS
from scheduler_search.sprogram import SProgram

pytestmark = pytest.mark.gpu

DEVICE = get_device("h200")
OPS = ("mamba2_chunk_state", "mamba2_chunk_scan")
SAMPLES_PER_CASE = 2
#: (batch, seqlen, nheads, headdim, dstate, ngroups, chunk_size, dtype).
SHAPES: tuple[tuple[int, int, int, int, int, int, int, str], ...] = (
    # The suite of the benchmark.
    (1, 1024, 80, 64, 128, 1, 256, "float16"),
    (1, 16384, 80, 64, 128, 1, 256, "float16"),
    (8, 4096, 80, 64, 128, 1, 256, "float16"),
    (64, 4096, 80, 64, 128, 1, 256, "float16"),
    # Heads sharing B and C in 8 groups; bf16.
    (2, 2048, 80, 64, 128, 8, 256, "float16"),
    (2, 2048, 80, 64, 128, 8, 256, "bfloat16"),
    # Three chunks (seqlen not a multiple of a 512-position span), headdim 128, dstate 64.
    (2, 768, 16, 128, 64, 2, 256, "bfloat16"),
    # Chunks of 64: the loop tiles no larger than a chunk.
    (1, 320, 8, 64, 128, 4, 64, "float16"),
)
#: Shapes whose chunk state is also checked with 16-bit states (``states_in_fp32: false``).
STATES_16_BIT = (SHAPES[2], SHAPES[5], SHAPES[6])
#: The chunk state fused with the state passing (``pass_states``): the states entering
#: each chunk and the final state, with and without initial states, in both states' dtypes.
PASSING = (
    (SHAPES[2], {"pass_states": True}),
    (SHAPES[5], {"pass_states": True, "initial_states": True}),
    (SHAPES[6], {"pass_states": True, "initial_states": True, "states_in_fp32": False}),
    (SHAPES[7], {"pass_states": True}),
    # Sequences packed in rows (seq_idx), one starting on a chunk's start.
    (SHAPES[5], {"pass_states": True, "initial_states": True, "seq_idx": True}),
    (SHAPES[6], {"pass_states": True, "seq_idx": True, "states_in_fp32": False}),
)

#: The chunk scan with ``mamba_chunk_scan_combined``'s gate ``z`` and D per channel,
#: packed sequences and C Bᵀ computed in the tile.
GATED = (
    (SHAPES[2], {"z": True}),
    (SHAPES[5], {"z": True, "d_per_channel": True}),
    (SHAPES[6], {"d_per_channel": True}),
    (SHAPES[5], {"seq_idx": True, "z": True}),
    (SHAPES[7], {"seq_idx": True}),
    # C Bᵀ computed in the tile (cb_in_tile): alone, gated and with packed sequences.
    (SHAPES[2], {"cb_in_tile": True}),
    (SHAPES[6], {"cb_in_tile": True, "z": True, "d_per_channel": True}),
    (SHAPES[5], {"cb_in_tile": True, "seq_idx": True}),
    (SHAPES[7], {"cb_in_tile": True, "seq_idx": True, "z": True}),
)


#: Variants each design is also checked in, where the space lowers them: thread-block
#: clusters (the chunk state's blocks of neighbouring heads multicast B; 40 producer
#: registers), one of single heads, which fits groups of an even number of heads
#: (ngroups 8), and persistent rings deeper than a tile's trips (the next tile's loads
#: fill the slots its last trips free).
_CLUSTER = {"cluster_axis": "heads", "producer_regs": 40}
VARIANTS: dict[str, tuple[dict[str, Any], ...]] = {"mamba2_chunk_state": (
    {**_CLUSTER, "cluster_size": 2}, {**_CLUSTER, "cluster_size": 4},
    {**_CLUSTER, "cluster_size": 2, "tile_g": 1, "tile_p": 64, "consumer_warpgroups": 1},
    {"stages_xb": 5}, {"stages_xb": 6, "tile_l": 32})}


def _designed(spec: OperatorSpec, stores: tuple[str | None, ...] = (None,)) -> list[SProgram]:
    """The operator's hand-written designs, where they fit the shape, each also with its
    loop's wgmma kept in flight (order overlap: the register A operand per trip parity),
    with each of ``stores`` (None: the design's own) and in each of its ``VARIANTS``."""
    space = ScheduleSpace(spec, DEVICE, feasibility(spec.op, DEVICE))
    built = []
    for choices in DESIGNS.get(spec.op, {}).values():
        for order in ("serial", "overlap"):
            for store in stores:
                for variant in ({}, *VARIANTS.get(spec.op, ())):
                    change = {"order": order, **variant} | ({"map_store": store} if store else {})
                    sprogram, validity = space.build({**choices, **change})
                    if validity.ok:
                        built.append(sprogram)
    return built


def _cases() -> list[tuple[str, OperatorSpec, SProgram]]:
    variants = [(op, shape, {}) for shape in SHAPES for op in OPS]
    variants += [("mamba2_chunk_state", shape, {"states_in_fp32": False})
                 for shape in STATES_16_BIT]
    variants += [("mamba2_chunk_state", shape, extra) for shape, extra in PASSING]
    variants += [("mamba2_chunk_scan", shape, extra) for shape, extra in GATED]
    variants += [("mamba2_chunk_state", SHAPES[7], {"seq_idx": True})]  # alone, packed
    cases = []
    for op, shape, extra in variants:
        batch, seqlen, nheads, headdim, dstate, ngroups, chunk, dtype = shape
        spec = parse_spec(op, {
            "batch": batch, "seqlen": seqlen, "nheads": nheads, "headdim": headdim,
            "dstate": dstate, "ngroups": ngroups, "chunk_size": chunk, "dtype": dtype, **extra})
        name = (f"{op}-{batch}x{seqlen}x{nheads}(g{ngroups})xp{headdim}xn{dstate}c{chunk}"
                f"-{dtype}{''.join(f'-{k}={v}' for k, v in extra.items())}")
        stores = ("cuda_core", "tma") if "pass_states" in extra else (None,)
        programs = {p.hash: p for p in (*sample_schedules(spec, DEVICE, SAMPLES_PER_CASE,
                                                          seed=7), *_designed(spec, stores))}
        cases += [(name, spec, p) for p in programs.values()]
    return cases


#: Built only where the kernels can run (building them takes a while on a CPU).
CASES = _cases() if cuda_device_visible() else []


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return check_kernels(CASES, DEVICE, tmp_path_factory)


@pytest.mark.parametrize(
    ("name", "spec", "sprogram"), CASES, ids=[f"{n}-{p.hash[:8]}" for n, _, p in CASES]
)
def test_generated_mamba2_is_correct(
    results: dict[str, Any], name: str, spec: OperatorSpec, sprogram: SProgram
) -> None:
    assert_correct(results[sprogram.hash], name, sprogram)


def test_both_ways_of_loading_dt_and_da_are_checked() -> None:
    """The sampled and designed kernels load dt / dA by TMA and by the CUDA cores."""
    if not CASES:
        pytest.skip("no GPU")
    for op in OPS:
        maps = {p.choices.get("map_vector_loads") for _, s, p in CASES if s.op == op}
        assert {"tma", "cuda_core"} <= maps, (op, maps)


@pytest.mark.parametrize("in_fp32", [True, False])
def test_both_ways_of_storing_the_states_are_checked(in_fp32: bool) -> None:
    """Chunk state's states, fp32 and 16-bit, are written with st.global and through TMA."""
    if not CASES:
        pytest.skip("no GPU")
    stores = {p.choices.get("map_store") for _, s, p in CASES
              if s.op == "mamba2_chunk_state" and s.states_in_fp32 == in_fp32}
    assert {"tma", "cuda_core"} <= stores, stores


def test_clusters_of_two_and_four_are_checked_on_the_suite_and_with_16_bit_states() -> None:
    if not CASES:
        pytest.skip("no GPU")
    clustered = {(s.batch, s.seqlen, s.states_in_fp32, p.cluster.size) for _, s, p in CASES
                 if p.cluster is not None}
    for size in (2, 4):
        assert (8, 4096, True, size) in clustered and (8, 4096, False, size) in clustered
    assert any(s.ngroups == 8 for _, s, p in CASES if p.cluster is not None)


def test_rings_deeper_than_a_tiles_trips_are_checked() -> None:
    if not CASES:
        pytest.skip("no GPU")
    deep = [p for _, s, p in CASES if s.op == "mamba2_chunk_state" and p.persistent
            and p.stages["xb"] > s.chunk_size // p.tile["l"]]
    assert len(deep) >= 4
