"""softmax_backward: every Numba version vs the reference; the reference vs finite differences.

Shapes: L = entries per row.
"""
import numpy as np
import pytest

from minitensor.kernels.softmax_backward import numba_cpu
from minitensor.kernels.softmax_backward.reference import softmax_backward_ref
from minitensor.kernels.softmax_forward.reference import softmax_forward_ref
from tests.minitensor.kernels._close import assert_close

SHAPES = [(1, 1), (7, 5), (33, 17), (2, 1000), (2, 3, 5, 17)]


@pytest.mark.parametrize("version", sorted(numba_cpu.VERSIONS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_backward_matches_reference(monkeypatch, version, dtype, shape):
    monkeypatch.setattr(numba_cpu, "DEFAULT", version)
    rng = np.random.default_rng(0)
    mask = rng.random(shape) < 0.2
    y = softmax_forward_ref(rng.standard_normal(shape), 1.0, mask).astype(dtype)  # blocked: y = 0
    dy = rng.standard_normal(shape).astype(dtype)
    dx = numba_cpu.softmax_backward(y, dy, 0.3)
    assert dx.dtype == y.dtype and dx.shape == y.shape
    assert_close(dx, softmax_backward_ref(y, dy, 0.3), f"softmax_backward v{version}")
    assert (dx[mask] == 0).all()


def test_softmax_backward_reference_matches_finite_differences():
    """d/dx of sum(r * softmax(scale * x)) by central differences, float64, random cotangent r."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 6))
    mask = np.zeros((3, 6), dtype=bool)
    mask[1, 2] = True
    r = rng.standard_normal((3, 6))
    scale, h = 0.8, 1e-6
    y = softmax_forward_ref(x, scale, mask)
    numeric = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[idx] = h
        plus = (r * softmax_forward_ref(x + step, scale, mask)).sum()
        minus = (r * softmax_forward_ref(x - step, scale, mask)).sum()
        numeric[idx] = (plus - minus) / (2 * h)
    assert_close(softmax_backward_ref(y, r, scale), numeric, "softmax_backward_ref vs fd",
                 atol=1e-8, rtol=1e-6)
