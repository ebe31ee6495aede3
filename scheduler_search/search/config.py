"""The knobs of the search itself (a preset fills them for a kind of device)."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler_search.search.records import SOURCE_SEARCH


@dataclass(frozen=True)
class SearchConfig:
    """Knobs of the search itself.

    Args:
        seed: seeds the sampler; same seed, same space and same measurements give the same
            trials.
        pool_factor: the sampler is asked until the round's pool holds this many
            candidates per free executor slot, and the cost model picks the best of them.
            ``None``: it is asked ``sampler_asks_per_slot`` times per free slot instead,
            and its candidates take turns with the other sources' (see ``sources``).
        n_startup_trials: trials the TPE sampler draws at random before modelling.
        retime_top_k: finalists re-timed at the end (1: no re-timing beyond one round).
        retime_rounds: interleaved rounds of the final re-timing.
        retime_leaders: each schedule that enters this many fastest is timed once more by
            the final method as the search goes; the fastest by that method join the
            final re-timing (0: off; see :mod:`~scheduler_search.search.retiming`).
        max_asks_per_candidate: with ``pool_factor``: asks allowed per pool slot before
            a round gives up.
        exhausted_after: rounds in a row without a new candidate that end the search.
        mirror_pruned: also copy pruned trials to the persistent study (slow on an RDB).
        batch_size: candidates measured per round (default: the executor's
            ``batch_size()``).
        first_batch_size: the first round's width where narrower than ``batch_size``
            (``None``: as wide): its results are the first a user sees, and on a large
            shape checking and timing one candidate takes a fifth of a second (an
            8192x28672x8192 GEMM launch takes 6 ms on an H200).
        overlap: pipeline the rounds (see :mod:`scheduler_search.search.driver`).
        sources: the proposal sources after the seeds, by name, in the order a batch's
            free slots are dealt to them in turns: ``search`` (the sampler; required,
            since it also hands out the seeds), ``local`` (neighbours of the best
            measured) and ``model`` (the cost model's picks of random valid schedules).
            See :mod:`scheduler_search.search.proposals`.
        sampler_asks_per_slot: without ``pool_factor``: asks of the sampler per free
            slot and round.
        local_top: ``local``: measured schedules whose neighbours are proposed.
        random_per_slot: ``model``: random valid samples per free slot the cost model
            picks from.
        stop_when_tied: end the search after this many rounds in a row that measured
            only latencies already seen (``None``: never); for deterministic devices.
    """

    seed: int = 0
    pool_factor: int | None = 4
    n_startup_trials: int = 16
    retime_top_k: int = 3
    retime_rounds: int = 3
    retime_leaders: int = 0
    max_asks_per_candidate: int = 12
    exhausted_after: int = 3
    mirror_pruned: bool = False
    batch_size: int | None = None
    first_batch_size: int | None = None
    overlap: bool = False
    sources: tuple[str, ...] = (SOURCE_SEARCH,)
    sampler_asks_per_slot: int = 2
    local_top: int = 3
    random_per_slot: int = 4
    stop_when_tied: int | None = None
