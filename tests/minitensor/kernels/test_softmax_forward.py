"""softmax_forward: every Numba version vs the reference, and the reference vs the definition.

Shapes: L = entries per row (keys); B, H, T as in attention scores (B, H, T, L).
"""
import numpy as np
import pytest

from minitensor.kernels.softmax_forward import numba_cpu
from minitensor.kernels.softmax_forward.reference import softmax_forward_ref
from tests.minitensor.kernels._close import assert_close

DTYPES = [np.float32, np.float64]
VERSIONS = sorted(numba_cpu.VERSIONS)
SHAPES_AND_MASKS = [  # (x shape, mask shape or None)
    ((1, 1), None),
    ((7, 5), (7, 5)),
    ((33, 17), (1, 17)),
    ((3, 1000), None),
    ((2, 3, 5, 17), (2, 1, 1, 17)),  # padding mask (B, 1, 1, L)
    ((2, 3, 5, 5), (1, 1, 5, 5)),  # causal mask (1, 1, T, L)
    ((2, 3, 5, 17), (2, 1, 5, 17)),
    ((2, 3, 5, 7), (2, 1, 5, 1)),  # broadcast along L too
    ((2, 2, 3, 4, 6), (2, 1, 1, 1, 6)),  # more than 4 axes
    ((3, 4, 13, 9), (3, 1, 13, 9)),  # 156 rows: several tiles of rows (v4), a part-filled last one
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,mask_shape", SHAPES_AND_MASKS)
def test_softmax_forward_matches_reference(monkeypatch, version, dtype, shape, mask_shape):
    monkeypatch.setattr(numba_cpu, "DEFAULT", version)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    mask = None if mask_shape is None else rng.random(mask_shape) < 0.3
    y = numba_cpu.softmax_forward(x, 0.7, mask)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert_close(y, softmax_forward_ref(x, 0.7, mask), f"softmax_forward v{version}")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_forward_fully_masked_rows_give_zeros(monkeypatch, version, dtype):
    monkeypatch.setattr(numba_cpu, "DEFAULT", version)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 2, 4, 9)).astype(dtype)
    mask = rng.random((3, 1, 4, 9)) < 0.5
    mask[1, 0, 2, :] = True  # one fully blocked query row, all heads
    mask[2] = True  # a fully blocked sentence
    y = numba_cpu.softmax_forward(x, 1.0, mask)
    assert np.isfinite(y).all()
    assert (y[1, :, 2] == 0).all() and (y[2] == 0).all()
    assert (y[np.broadcast_to(mask, y.shape)] == 0).all()
    assert_close(y, softmax_forward_ref(x, 1.0, mask), f"softmax_forward v{version} masked")


@pytest.mark.parametrize("version", VERSIONS)
def test_softmax_forward_large_logits_do_not_overflow(monkeypatch, version):
    monkeypatch.setattr(numba_cpu, "DEFAULT", version)
    x = np.array([[1000.0, 999.0, -1000.0], [-500.0, -501.0, -502.0]], dtype=np.float32)
    assert_close(numba_cpu.softmax_forward(x, 1.0, None), softmax_forward_ref(x, 1.0, None),
                 f"softmax_forward v{version} extremes")


def test_softmax_forward_reference_matches_definition():
    """Closed form on a tiny example: exp(z)/sum(exp(z)) with blocked entries dropped."""
    x = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]])
    mask = np.array([[False, True, False], [False, False, False]])
    z = 0.5 * x
    row0 = np.array([np.exp(z[0, 0]), 0.0, np.exp(z[0, 2])]) / (np.exp(z[0, 0]) + np.exp(z[0, 2]))
    row1 = np.exp(z[1]) / np.exp(z[1]).sum()
    assert_close(softmax_forward_ref(x, 0.5, mask), np.stack([row0, row1]), "reference")
    assert (softmax_forward_ref(x, 0.5, np.ones_like(mask)) == 0).all()


# rows of non-finite x and what the reference's rule makes of them (scale 1, nothing blocked)
SPECIAL_ROWS = [
    ([np.inf, 1.0, np.inf, -np.inf], [0.5, 0.0, 0.5, 0.0]),  # +inf max: the +inf entries share
    ([np.inf, 2.0, 3.0, 4.0], [1.0, 0.0, 0.0, 0.0]),
    ([-np.inf, 0.0, -np.inf, 0.0], [0.0, 0.5, 0.0, 0.5]),   # -inf entries get 0
    ([-np.inf] * 4, [0.0] * 4),                              # nothing above -inf: zeros
    ([np.nan, 1.0, 2.0, 3.0], [np.nan] * 4),                 # a NaN makes the row NaN
    ([np.nan, np.inf, 2.0, 3.0], [np.nan] * 4),
]


def test_softmax_forward_reference_non_finite_rule():
    x = np.array([r for r, _ in SPECIAL_ROWS])
    want = np.array([w for _, w in SPECIAL_ROWS])
    assert_close(softmax_forward_ref(x, 1.0, None), want, "non-finite rows")
    blocked_nan = np.array([[np.nan, 1.0, 1.0]])                 # a blocked NaN is never read
    assert_close(softmax_forward_ref(blocked_nan, 1.0, np.array([[True, False, False]])),
                 np.array([[0.0, 0.5, 0.5]]), "blocked NaN")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_forward_non_finite_rows_follow_the_reference(monkeypatch, version, dtype):
    monkeypatch.setattr(numba_cpu, "DEFAULT", version)
    rows = [r for r, _ in SPECIAL_ROWS] + [[1.0, 2.0, 3.0, 4.0]]
    x = np.array(rows * 3, dtype=dtype).reshape(3, len(rows), 4)
    mask = np.zeros((3, 1, 4), dtype=bool)
    mask[1, 0, 1] = True                                         # blocks a finite entry in one copy
    mask[2, 0, 0] = True                                         # blocks the first (+inf / NaN) entries
    y = numba_cpu.softmax_forward(x, 0.5, mask)
    assert_close(y, softmax_forward_ref(x, 0.5, mask), f"softmax_forward v{version} non-finite", atol=1e-6)
