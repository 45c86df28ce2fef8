"""dropout_add_layernorm_forward: every Numba version vs the reference (y, z, mean, rstd; with and without
dropout and bias); the reference vs its definition; the GPU launcher's host code on the CPU (NumPy for
CuPy, its kernel emulated): what it passes for the draws, the bias, the time-major rows.

Shapes: D = d_model; leading axes are rows.
"""
import numpy as np
import pytest

from minitensor.dtypes import BF16
from minitensor.kernels.bf16_cast.reference import as_float64
from minitensor.kernels.dropout_add_layernorm_forward import cupy_launch, numba_cpu
from minitensor.kernels.dropout_add_layernorm_forward.reference import dropout_add_layernorm_forward_ref
from minitensor.kernels.layernorm_forward.reference import layernorm_forward_ref
from minitensor.kernels.numba_draws import draw_rows
from tests.minitensor.kernels._close import as_dtype, assert_close
from tests.minitensor.kernels._gpu import launcher_on_numpy as on_numpy

SHAPES = [(1, 1), (7, 5), (33, 17), (2, 3, 100), (4, 1000)]


def inputs(rng, shape, dtype, p, with_bias):
    x = as_dtype(rng.standard_normal(shape) * 2 + 1, dtype)
    s = as_dtype(rng.standard_normal(shape), dtype)
    u = rng.random(shape).astype(np.float32) if p else None
    bias = as_dtype(rng.standard_normal(shape[-1]), dtype) if with_bias else None
    gamma, beta = (rng.standard_normal(shape[-1]).astype(np.float32 if dtype != np.float64 else dtype) for _ in range(2))
    return x, s, u, p, bias, gamma, beta, 1e-5


@pytest.mark.parametrize("version", sorted(numba_cpu.VERSIONS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("p,with_bias", [(0.0, False), (0.3, False), (0.1, True)])
@pytest.mark.parametrize("shape", SHAPES)
def test_dropout_add_layernorm_forward_matches_reference(monkeypatch, version, dtype, p, with_bias, shape):
    monkeypatch.setattr(numba_cpu, "DEFAULT", version)
    args = inputs(np.random.default_rng(0), shape, dtype, p, with_bias)
    got = numba_cpu.dropout_add_layernorm_forward(*args)
    for name, a, b in zip(("y", "z", "mean", "rstd"), got, dropout_add_layernorm_forward_ref(*args)):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert_close(a, b, f"v{version} {name}", rtol=1e-4 if dtype == np.float32 and name == "rstd" else None)


@pytest.mark.parametrize("version", sorted(numba_cpu.VERSIONS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_time_major_draws_are_read_where_they_lie(monkeypatch, version, dtype):
    """Time-major x (T, B, D) with the swapped view of (B, T, D) draws, as Backend.draws hands them: every
    version matches the reference on those draws, and the wrapper reads them without a copy."""
    monkeypatch.setattr(numba_cpu, "DEFAULT", version)
    rng = np.random.default_rng(4)
    x, s, _, p, bias, gamma, beta, eps = inputs(rng, (5, 3, 16), dtype, 0.3, True)
    u = rng.random((3, 5, 16)).astype(np.float32).swapaxes(0, 1)
    for name, a, b in zip(("y", "z", "mean", "rstd"), numba_cpu.dropout_add_layernorm_forward(x, s, u, p, bias, gamma,
                                                                                              beta, eps),
                          dropout_add_layernorm_forward_ref(x, s, u, p, bias, gamma, beta, eps)):
        assert_close(a, b, f"v{version} {name}", rtol=1e-4 if dtype == np.float32 and name == "rstd" else None)
    rows, positions, batch = draw_rows(u, 16)
    assert np.shares_memory(rows, u) and rows.flags.c_contiguous and (positions, batch) == (5, 3)
    assert draw_rows(np.ascontiguousarray(u), 16)[1:] == (0, 0)


def test_dropout_add_layernorm_forward_reference_is_its_definition():
    """z = x + (s + b) / (1 - p) where u >= p, else x; y = LayerNorm(z), as the unfused references compute it."""
    rng = np.random.default_rng(1)
    x, s, u, p, bias, gamma, beta, eps = inputs(rng, (6, 8), np.float64, 0.25, True)
    y, z, mean, rstd = dropout_add_layernorm_forward_ref(x, s, u, p, bias, gamma, beta, eps)
    np.testing.assert_allclose(z, x + np.where(u >= p, (s + bias) / (1 - p), 0.0), rtol=1e-15)
    for got, want in zip((y, mean, rstd), layernorm_forward_ref(z, gamma, beta, eps)):
        np.testing.assert_array_equal(got, want)
    bits = dropout_add_layernorm_forward_ref(*inputs(rng, (3, 8), BF16, 0.1, True))
    assert bits[0].dtype == bits[1].dtype == BF16 and bits[2].dtype == np.float32


# ---- the GPU launcher's host code, run on the CPU ----------------------------------------------
def _emulated_kernel(name):
    """What cuda.cu's kernel does with the arrays the launcher passes (the CUDA itself runs in *_gpu.py):
    the draws from u when has_u, else from a stand-in for SplitMix64 of (seed, logical row · D + j)."""
    def run(grid, block, args):
        (y, z, mean, rstd, x, s, bias, has_bias, gamma, beta, eps, u, has_u, seed, p_u, keep, drop, rows, D,
         positions, batch) = args
        D, rows = int(D), int(rows)
        if drop and not has_u:                                        # draws by the (B, T, D) transpose's index
            logical = np.arange(rows) if batch <= 0 else \
                (np.arange(rows) % int(batch)) * int(positions) + np.arange(rows) // int(batch)
            u = np.random.default_rng(int(seed)).random(rows * D)[(logical[:, None] * D + np.arange(D))]
        result = dropout_add_layernorm_forward_ref(x.reshape(-1, D), s.reshape(-1, D), None if not drop else
                                                   np.asarray(u).reshape(-1, D), float(p_u) if drop else 0.0,
                                                   bias if has_bias else None, gamma, beta, float(eps))
        for out, value in zip((y, z, mean, rstd), result):
            out.reshape(value.shape)[...] = value
    return run


@pytest.fixture
def launcher_on_numpy(monkeypatch):
    return on_numpy(monkeypatch, cupy_launch, _emulated_kernel)


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("p,with_bias", [(0.0, True), (0.2, False)])
def test_gpu_launcher_passes_draws_bias_and_statistics(launcher_on_numpy, dtype, p, with_bias):
    args = inputs(np.random.default_rng(2), (5, 3, 8), dtype, p, with_bias)
    got = launcher_on_numpy.dropout_add_layernorm_forward(*args)
    for name, a, b in zip(("y", "z", "mean", "rstd"), got, dropout_add_layernorm_forward_ref(*args)):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert_close(as_float64(a), as_float64(b), name, atol=1e-5, rtol=1e-5)


def test_gpu_launcher_time_major_draws_are_the_transposes(launcher_on_numpy):
    """Seeded and time-major: element (t, b, d) gets the draw of (b, t, d), so the same seed masks the two
    layouts of the same numbers alike."""
    x, s, _, _, bias, gamma, beta, eps = inputs(np.random.default_rng(3), (4, 3, 8), np.float32, 0.0, True)
    seeded = launcher_on_numpy.dropout_add_layernorm_forward_seeded
    tm = seeded(x, s, 11, 0.4, bias, gamma, beta, eps, time_major=True)
    bm = seeded(np.ascontiguousarray(x.swapaxes(0, 1)), np.ascontiguousarray(s.swapaxes(0, 1)), 11, 0.4, bias,
                gamma, beta, eps)
    np.testing.assert_array_equal(tm[1], bm[1].swapaxes(0, 1))
    assert launcher_on_numpy.fits(1024) and not launcher_on_numpy.fits(1025)
