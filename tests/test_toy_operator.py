"""An operator is one registered unit: a toy operator, defined and registered in this
module alone (its spec, its rows of the knob table, its kernel hooks, its fp32 reference
and its dashboard words), is validated, generated, tuned on the simulated device end to
end, cached and described, with no other file of pipetune naming it. It computes GEMM's
product under its own name (so GEMM's hooks write its kernels), with its own narrower knob
table and no peer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

import pipetune
from codegen import codegen_version, register_hooks, render
from codegen.kernels.gemm import GemmHooks
from codegen.render import HOOKS, HOOKS_VERSIONS
from scheduler_search.hardware import get_device
from scheduler_search.ops import OPERATORS, parse_spec, register_operator
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.space import ScheduleSpace
from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED
from scheduler_search.space.knob_rows import KNOB_ROWS, KnobRows, register_knob_rows
from scheduler_search.sprogram import plan_sprogram
from service.dashboard.operators import (
    OPERATOR_WORDS,
    operator_text,
    register_operator_text,
)
from workers.verify import REFERENCES, reference, register_reference


class ToyMatmulSpec(GemmSpec):
    """``c = a · b`` as an operator of its own."""

    op: ClassVar[str] = "toy_matmul"
    baseline: ClassVar[str | None] = None
    runtime_dims: ClassVar[tuple[str, ...]] = ()


TOY_ROWS = KnobRows(tiles={"m": (64, 128), "n": (64, 128), "k": (32, 64)}, stages=(2, 3, 4))


def register_toy() -> None:
    """Everything the toy operator needs pipetune to know."""
    register_operator(ToyMatmulSpec)
    register_knob_rows("toy_matmul", TOY_ROWS)
    register_reference("toy_matmul", lambda xp, params, inputs: {
        "c": xp.matmul(inputs["a"], inputs["b"])})
    register_operator_text("toy_matmul", "Toy matmul", "One bar per sTask of the toy.")
    register_hooks("toy_matmul", GemmHooks, "toy-matmul-1")


@pytest.fixture
def toy() -> Iterator[None]:
    """The toy registered for one test; every registry as it was afterwards."""
    registries = (OPERATORS, KNOB_ROWS, REFERENCES, OPERATOR_WORDS, HOOKS, HOOKS_VERSIONS)
    saved = [dict(registry) for registry in registries]
    register_toy()
    yield
    for registry, before in zip(registries, saved, strict=True):
        registry.clear()
        registry.update(before)


def test_an_unregistered_operator_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="toy_matmul"):
        parse_spec("toy_matmul", {"m": 256, "n": 256, "k": 256})


@pytest.mark.usefixtures("toy")
def test_a_registered_toy_operator_is_validated_spaced_referenced_and_described() -> None:
    spec = parse_spec("toy_matmul", {"m": 256, "n": 256, "k": 256, "dtype": "float16"})
    assert isinstance(spec, ToyMatmulSpec)
    space = ScheduleSpace(spec, get_device("sim:h200"))
    assert {k.name: k.options for k in space.knobs}["tile_m"] == (64, 128)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 5), np.float32), rng.standard_normal((5, 2), np.float32)
    np.testing.assert_allclose(reference(np, "toy_matmul", {}, {"a": a, "b": b})["c"], a @ b,
                               rtol=1e-6)
    assert operator_text("toy_matmul").title == "Toy matmul"
    sprogram = plan_sprogram(spec, get_device("h200"), {**GEMM_WARP_SPECIALIZED, "tile_n": 128})
    artifact = render(sprogram, spec, get_device("h200"))
    assert artifact.entry.startswith("pipetune_toy_matmul_") and "wgmma" in artifact.source
    assert codegen_version().endswith("+toy-matmul-1")


@pytest.mark.usefixtures("toy")
def test_a_registered_toy_operator_tunes_on_the_simulated_device_and_is_cached(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cache.db'}"
    params = {"m": 512, "n": 384, "k": 256, "dtype": "float16"}
    first = pipetune.tune("toy_matmul", device="sim:h200", database_url=url, progress=False,
                          budget={"trials": 12}, **params)
    assert first.run is not None and first.run["status"] == "succeeded"
    assert first.run["trials_done"] == 12 and first.schedule is not None
    assert first.schedule["workload"]["op"] == first.schedule["schedule"]["op"] == "toy_matmul"
    tiles = first.schedule["schedule"]["tile"]
    assert tiles["m"] in TOY_ROWS.tiles["m"] and tiles["k"] in TOY_ROWS.tiles["k"]
    again = pipetune.tune("toy_matmul", device="sim:h200", database_url=url, progress=False,
                          **params)
    assert again.cached and again.schedule["schedule_hash"] == first.schedule["schedule_hash"]
