"""numba_math's row_max against np.max: every length around the lane count, the maximum anywhere
(inside the lane blocks, in the tail, first), float32 and float64, -inf entries."""
import numpy as np
import pytest

from minitensor.kernels.numba_math import MAX_LANES, row_max


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 2, MAX_LANES - 1, MAX_LANES, MAX_LANES + 1, 3 * MAX_LANES + 7])
def test_row_max_equals_np_max_wherever_the_maximum_is(dtype, n):
    rng = np.random.default_rng(n)
    for where in {0, n // 2, n - 1}:
        row = rng.standard_normal(n).astype(dtype) - 10
        row[rng.random(n) < 0.2] = -np.inf
        row[where] = 5.0
        assert row_max(row) == row.max() == 5.0, where


def test_row_max_of_all_minus_infinity():
    assert row_max(np.full(70, -np.inf, np.float32)) == -np.inf
