"""dropout_forward: every Numba version vs the reference; the reference vs its definition.

Shapes: any; u has x's shape.
"""
import numpy as np
import pytest

from minitensor.kernels.dropout_forward import numba_cpu
from minitensor.kernels.dropout_forward.reference import dropout_forward_ref
from tests.minitensor.kernels._close import assert_close


@pytest.mark.parametrize("version", sorted(numba_cpu.VERSIONS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1,), (7, 5), (33, 17), (2, 3, 1000)])
@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 1.0])
def test_dropout_forward_matches_reference(monkeypatch, version, dtype, shape, p):
    monkeypatch.setattr(numba_cpu, "DEFAULT", version)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    u = rng.random(shape, dtype=np.float32)
    u.flat[0] = p if p < 1 else u.flat[0]  # u == p is kept (u >= p)
    y = numba_cpu.dropout_forward(x, u, p)
    assert y.dtype == dtype and y.shape == shape
    assert_close(y, dropout_forward_ref(x, u, p), f"dropout_forward v{version} p={p}")


def test_dropout_forward_reference_definition():
    x = np.array([1.0, -2.0, 3.0, 4.0])
    u = np.array([0.05, 0.2, 0.2, 0.1])
    assert_close(dropout_forward_ref(x, u, 0.2), np.array([0.0, -2.5, 3.75, 0.0]), "p=0.2")
    assert (dropout_forward_ref(x, u, 1.0) == 0).all()
    assert_close(dropout_forward_ref(x, u, 0.0), x, "p=0")
