"""layernorm_backward: every Numba version vs the reference; the reference vs central differences.

Shapes: N rows, D = d_model.
"""
import numpy as np
import pytest

from minitensor.kernels.layernorm_backward import numba_cpu
from minitensor.kernels.layernorm_backward.reference import layernorm_backward_ref
from minitensor.kernels.layernorm_forward.reference import layernorm_forward_ref
from tests.minitensor.kernels._close import assert_close

SHAPES = [(1, 1), (7, 5), (33, 17), (3, 1000), (2, 3, 17)]


@pytest.mark.parametrize("version", sorted(numba_cpu.VERSIONS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_layernorm_backward_matches_reference(monkeypatch, version, dtype, shape):
    monkeypatch.setattr(numba_cpu, "DEFAULT", version)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)
    gamma = rng.standard_normal(shape[-1]).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    _, mean, rstd = layernorm_forward_ref(x, gamma, gamma, 1e-5)
    got = numba_cpu.layernorm_backward(dy, x, gamma, mean, rstd)
    ref = layernorm_backward_ref(dy, x, gamma, mean, rstd)
    loose = {"atol": 1e-5, "rtol": 1e-4} if dtype == np.float32 else {}  # sums over rows in float32
    for name, a, b in zip(("dx", "dgamma", "dbeta"), got, ref):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert_close(a, b, f"layernorm_backward v{version} {name}", **loose)


def test_layernorm_backward_reference_matches_finite_differences():
    """Gradients of sum(r * layernorm_forward_ref(x, gamma, beta)) by central differences, float64."""
    rng = np.random.default_rng(3)
    x, r = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    gamma, beta = rng.standard_normal(5), rng.standard_normal(5)
    eps, h = 1e-5, 1e-6

    def objective(x_, gamma_, beta_):
        return (r * layernorm_forward_ref(x_, gamma_, beta_, eps)[0]).sum()

    def numeric(arg):
        args = [x, gamma, beta]
        grad = np.zeros_like(args[arg])
        for idx in np.ndindex(grad.shape):
            plus = [a.copy() for a in args]
            minus = [a.copy() for a in args]
            plus[arg][idx] += h
            minus[arg][idx] -= h
            grad[idx] = (objective(*plus) - objective(*minus)) / (2 * h)
        return grad

    _, mean, rstd = layernorm_forward_ref(x, gamma, beta, eps)
    dx, dgamma, dbeta = layernorm_backward_ref(r, x, gamma, mean, rstd)
    for name, got, arg in (("dx", dx, 0), ("dgamma", dgamma, 1), ("dbeta", dbeta, 2)):
        assert_close(got, numeric(arg), f"layernorm_backward_ref {name} vs fd", atol=1e-8, rtol=1e-6)
