"""layernorm_forward: every Numba version vs the reference (y, mean, rstd); reference vs definition.

Shapes: D = d_model (normalised axis); leading axes are rows.
"""
import numpy as np
import pytest

from minitensor.kernels.layernorm_forward import numba_cpu
from minitensor.kernels.layernorm_forward.reference import layernorm_forward_ref
from tests.minitensor.kernels._close import assert_close

SHAPES = [(1, 1), (7, 5), (33, 17), (3, 1000), (2, 3, 17)]


@pytest.mark.parametrize("version", sorted(numba_cpu.VERSIONS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_layernorm_forward_matches_reference(monkeypatch, version, dtype, shape):
    monkeypatch.setattr(numba_cpu, "DEFAULT", version)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    gamma = rng.standard_normal(shape[-1]).astype(dtype)
    beta = rng.standard_normal(shape[-1]).astype(dtype)
    y, mean, rstd = numba_cpu.layernorm_forward(x, gamma, beta, 1e-5)
    y_ref, mean_ref, rstd_ref = layernorm_forward_ref(x, gamma, beta, 1e-5)
    assert y.dtype == x.dtype and mean.dtype == mean_ref.dtype == rstd.dtype
    assert mean.shape == rstd.shape == shape[:-1]
    name = f"layernorm_forward v{version}"
    assert_close(y, y_ref, f"{name} y")
    assert_close(mean, mean_ref, f"{name} mean")
    assert_close(rstd, rstd_ref, f"{name} rstd", rtol=1e-4 if dtype == np.float32 else None)


def test_layernorm_forward_reference_matches_definition():
    """Hand-checkable row: x = [1, 2, 3, 6]: mean 3, biased var (4+1+0+9)/4 = 3.5."""
    x = np.array([[1.0, 2.0, 3.0, 6.0]])
    gamma, beta = np.array([1.0, 2.0, 1.0, 0.5]), np.array([0.0, 1.0, 0.0, -1.0])
    y, mean, rstd = layernorm_forward_ref(x, gamma, beta, 0.0)
    assert_close(mean, np.array([3.0]), "mean")
    assert_close(rstd, np.array([1 / np.sqrt(3.5)]), "rstd")
    assert_close(y, (x - 3.0) / np.sqrt(3.5) * gamma + beta, "y")
    assert layernorm_forward_ref(x.astype(np.float32), gamma, beta, 1e-5)[1].dtype == np.float32
