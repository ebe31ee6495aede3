"""The check's one-kernel sums on a real GPU agree with the NumPy definition of the
relative L2 error (``workers.verify.rel_l2_error``), count non-finite outputs, and keep
the zero-reference case.

Run on an H200 with ``pytest tests/workers -m gpu``; skipped where CuPy sees no GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from workers.verify import rel_l2_error

pytestmark = pytest.mark.gpu

cupy = pytest.importorskip("cupy")


@pytest.mark.parametrize("size", [1, 31, 4097, 3_000_001])
def test_the_error_matches_the_numpy_definition(size: int) -> None:
    from workers.l2_check import l2_check

    rng = np.random.default_rng(size)
    ref = rng.standard_normal(size).astype(np.float32)
    out = ref + rng.standard_normal(size).astype(np.float32) * np.float32(1e-3)
    rel, nonfinite = l2_check(cupy.asarray(out), cupy.asarray(ref))
    assert nonfinite == 0
    assert rel == pytest.approx(rel_l2_error(np, out, ref), rel=1e-5)
    assert l2_check(cupy.asarray(ref), cupy.asarray(ref)) == (0.0, 0)


def test_non_finite_outputs_are_counted_and_fail() -> None:
    from workers.l2_check import l2_check

    ref = np.ones((64, 48), dtype=np.float32)
    out = ref.copy()
    out[3, 5], out[60, 0], out[0, 47] = np.nan, np.inf, -np.inf
    rel, nonfinite = l2_check(cupy.asarray(out), cupy.asarray(ref))
    assert np.isnan(rel) and nonfinite == 3


def test_a_zero_reference_gives_the_absolute_error() -> None:
    from workers.l2_check import l2_check

    out = np.full(1000, 0.5, dtype=np.float32)
    rel, _ = l2_check(cupy.asarray(out), cupy.zeros(1000, dtype=cupy.float32))
    assert rel == pytest.approx(np.sqrt(1000 * 0.25))


def test_strided_outputs_are_read_as_their_elements() -> None:
    from workers.l2_check import l2_check

    ref = cupy.asarray(np.arange(200, dtype=np.float32).reshape(10, 20))
    out = ref.T.copy().T  # same values, column-major
    assert l2_check(out, ref) == (0.0, 0)
    assert l2_check(out[:, ::2], ref[:, ::2])[0] == 0.0
