"""Each operator's rows of the knob table, registered by operator name.

Rows are data, in the style of Kernel Tuner's option tables: extending an operator's
space is a matter of editing its row, and a new operator registers its own
(:func:`register_knob_rows`) without touching the table's logic
(:mod:`scheduler_search.space.tables`), which filters the options by what the device can
run and adds the knobs every warp-specialised kernel shares.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KnobRows:
    """An operator's options before the device filters them.

    Args:
        tiles: tile sizes per loop axis (an axis with one option is no knob).
        stages: ring depths of each operand stream.
        orders: loop orders on devices with async MMA (``rotate`` needs a loop of two MMAs).
        mappable: sTasks with a choice of sEU (the choices are the sTask's units the
            device has).
        vector_loads: where the operator's 1-D loads go together (``map_vector_loads``).
        cluster_sizes: thread-block clusters, for operators whose code generation
            lowers them and where they can win (none: no knob).
        stream_k_waves: stream-K's shared waves (0: whole tiles), for operators whose
            code generation lowers it (none: no knob).
        split_k_blocks: blocks of a split-K cluster (1: a tile's loop on one block), for
            operators whose code generation lowers it (none: no knob).
    """

    tiles: dict[str, tuple[int, ...]]
    stages: tuple[int, ...]
    orders: tuple[str, ...] = ("serial", "overlap")
    mappable: tuple[str, ...] = ("store",)
    vector_loads: tuple[str, ...] = ()
    cluster_sizes: tuple[int, ...] = ()
    stream_k_waves: tuple[int, ...] = ()
    split_k_blocks: tuple[int, ...] = ()


KNOB_ROWS: dict[str, KnobRows] = {
    "gemm": KnobRows(
        tiles={"m": (64, 128, 192, 256), "n": (64, 96, 128, 160, 192, 224, 256),
               "k": (32, 64, 128)},
        stages=(1, 2, 3, 4, 5, 6),
        # Clusters: TMA multicast of the operand neighbouring tiles share.
        cluster_sizes=(1, 2),
        stream_k_waves=(0, 1, 2),
        # Split-K over a cluster: few weight tiles (decode) still use every SM.
        split_k_blocks=(1, 2, 3, 4, 5, 6, 8),
    ),
    "attention": KnobRows(
        tiles={"q": (64, 128, 192, 256), "kv": (64, 96, 128, 160, 176, 192, 224, 256),
               # Query heads of a kv group per tile (GQA): k and v tiles shared by them.
               "g": (1, 2, 4, 8)},
        stages=(1, 2, 3),
        orders=("serial", "overlap", "rotate"),
        mappable=("softmax_exp2", "store"),
    ),
    # The backward's key tile holds dk and dv (two fp32 accumulators of kv x d): smaller
    # key tiles than the forward's query tiles; query tiles are the loop's steps.
    "attention_backward": KnobRows(
        tiles={"kv": (64, 128), "q": (64, 128)},
        stages=(1, 2),
        # interleave: dP's product runs under the exponentials of P, dV's under dS.
        orders=("serial", "interleave"),
        mappable=("softmax_p",),
    ),
    # The chunk state's clusters along heads (B multicast, asked for by choices) are
    # lowered and correct but not offered: on an H200 (2026-12-02) pairs ran 3-6% slower
    # than single blocks on every suite shape and clusters of 4 11-16% slower (on a grid
    # of the 30 that run at once), so the cost model's multicast credit would only spend
    # measurements on them.
    "mamba2_chunk_state": KnobRows(
        tiles={"p": (64, 128), "n": (32, 64, 128, 256), "l": (32, 64, 128, 256),
               # Heads of a B group per tile, stacked in its rows: B tiles loaded once for
               # them (packs of 4 heads never won on the H200, 2026-11-30; they quadrupled
               # the space).
               "g": (1, 2)},
        # Persistent chunk states keep loading across tiles: rings deeper than a tile's
        # trips.
        stages=(1, 2, 3, 4, 5, 6),
        mappable=("decay", "store"),
        # dt and dA by TMA into shared memory, or by the consumers' own threads straight
        # into registers.
        vector_loads=("tma", "cuda_core"),
    ),
    "mamba2_chunk_scan": KnobRows(
        # chunk_size is a power of two; x tiles are 64-column boxes (no 192, no p 32).
        tiles={"l": (64, 128, 256), "p": (64, 128), "s": (32, 64, 128),
               # Heads of a group per tile, side by side in its columns: cb and C tiles
               # (the group's) loaded once for them.
               "g": (1, 2)},
        stages=(1, 2, 3),
        mappable=("decay", "store"),
        vector_loads=("tma", "cuda_core"),
    ),
}


def register_knob_rows(op: str, rows: KnobRows) -> None:
    """Make ``rows`` operator ``op``'s rows of the knob table (a second registration of
    an operator replaces its rows)."""
    KNOB_ROWS[op] = rows


__all__ = ["KNOB_ROWS", "KnobRows", "register_knob_rows"]
