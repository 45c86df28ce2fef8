"""dropout_add_layernorm_backward: every Numba version vs the reference (one and two gradients, with and
without dropout and bias); the reference vs the unfused references; the GPU launcher's host code on the
CPU (NumPy for CuPy, its kernels emulated): the two gradients, ds = dx without dropout, the sums' dtype.

Shapes: D = d_model; leading axes are rows.
"""
import numpy as np
import pytest

from minitensor.dtypes import BF16
from minitensor.kernels.bf16_cast.reference import as_float64
from minitensor.kernels.dropout_add_layernorm_backward import cupy_launch, numba_cpu
from minitensor.kernels.dropout_add_layernorm_backward.reference import dropout_add_layernorm_backward_ref
from minitensor.kernels.dropout_forward.reference import dropout_forward_ref
from minitensor.kernels.layernorm_backward.reference import layernorm_backward_ref
from minitensor.kernels.layernorm_forward.reference import layernorm_forward_ref
from tests.minitensor.kernels._close import as_dtype, assert_close
from tests.minitensor.kernels._gpu import launcher_on_numpy as on_numpy

SHAPES = [(1, 1), (7, 5), (33, 17), (2, 3, 100), (300, 256)]


def inputs(rng, shape, dtype, p, two):
    z = as_dtype(rng.standard_normal(shape) * 2 + 1, dtype)
    gamma = rng.standard_normal(shape[-1]).astype(np.float64 if dtype == np.float64 else np.float32)
    _, mean, rstd = layernorm_forward_ref(z, gamma, gamma, 1e-5)
    dys = tuple(as_dtype(rng.standard_normal(shape), dtype) for _ in range(2 if two else 1))
    u = rng.random(shape).astype(np.float32) if p else None
    return dys, z, u, p, gamma, mean, rstd


@pytest.mark.parametrize("version", sorted(numba_cpu.VERSIONS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("p,two,with_bias", [(0.0, False, False), (0.3, True, True), (0.0, True, True)])
@pytest.mark.parametrize("shape", SHAPES)
def test_dropout_add_layernorm_backward_matches_reference(monkeypatch, version, dtype, p, two, with_bias, shape):
    monkeypatch.setattr(numba_cpu, "DEFAULT", version)
    args = inputs(np.random.default_rng(0), shape, dtype, p, two) + (with_bias,)
    got = numba_cpu.dropout_add_layernorm_backward(*args)
    want = dropout_add_layernorm_backward_ref(*args)
    rows = max(int(np.prod(shape[:-1])), 1)
    for name, a, b in zip(("dx", "ds", "dgamma", "dbeta", "dbias"), got, want):
        if b is None:
            assert a is None, name
            continue
        sums = name.startswith("dg") or name.startswith("db")
        assert_close(a, b, f"v{version} {name}", atol=1e-5 * np.sqrt(rows) if sums and dtype == np.float32 else None)
    assert (got[1] is got[0]) == (p == 0.0)
    with pytest.raises(ValueError, match="one or two"):    # more are added first (Backend.at_most_two)
        numba_cpu.dropout_add_layernorm_backward(args[0] * 3, *args[1:])


@pytest.mark.parametrize("version", sorted(numba_cpu.VERSIONS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_time_major_draws_are_read_where_they_lie(monkeypatch, version, dtype):
    """Time-major z (T, B, D) with the swapped view of (B, T, D) draws (Backend.draws): the reference's
    gradients on those draws, the draws read in place (numba_draws.draw_rows)."""
    monkeypatch.setattr(numba_cpu, "DEFAULT", version)
    rng = np.random.default_rng(5)
    dys, z, _, p, gamma, mean, rstd = inputs(rng, (5, 3, 16), dtype, 0.3, True)
    u = rng.random((3, 5, 16)).astype(np.float32).swapaxes(0, 1)
    args = (dys, z, u, p, gamma, mean, rstd, True)
    for name, a, b in zip(("dx", "ds", "dgamma", "dbeta", "dbias"), numba_cpu.dropout_add_layernorm_backward(*args),
                          dropout_add_layernorm_backward_ref(*args)):
        assert_close(a, b, f"v{version} {name}", atol=1e-4 if dtype == np.float32 and name[1] in "gb" else None)


def test_dropout_add_layernorm_backward_reference_is_the_unfused_chain():
    """dx = LayerNorm's backward of dy + dy2; ds = dropout of dx (the same u); dbias = Σ_rows ds."""
    rng = np.random.default_rng(1)
    dys, z, u, p, gamma, mean, rstd = inputs(rng, (6, 8), np.float64, 0.25, True)
    dx, ds, dgamma, dbeta, dbias = dropout_add_layernorm_backward_ref(dys, z, u, p, gamma, mean, rstd, True)
    for got, want in zip((dx, dgamma, dbeta), layernorm_backward_ref(dys[0] + dys[1], z, gamma, mean, rstd)):
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-14)
    np.testing.assert_array_equal(ds, dropout_forward_ref(dx, u, p))
    np.testing.assert_allclose(dbias, ds.sum(axis=0), rtol=1e-14)


# ---- the GPU launcher's host code, run on the CPU ----------------------------------------------
def _emulated_kernel(name):
    """What cuda.cu's kernels do with the arrays the launcher passes (the CUDA runs in *_gpu.py): the rows
    kernel's outputs and per-block sums (all in block 0 here), then the column kernel's."""
    if "params" in name:
        def columns(grid, block, args):
            sums, partial, blocks, D = args
            sums.reshape(-1)[...] = partial.reshape(int(blocks), -1).sum(axis=0)
        return columns

    def rows(grid, block, args, shared_mem=0):
        (dx, ds, partial, dy, dy2, two, z, gamma, mean, rstd, u, has_u, seed, p_u, keep, drop, n, D,
         positions, batch) = args
        D = int(D)
        dys = (dy, dy2) if two else (dy,)
        out = dropout_add_layernorm_backward_ref(tuple(d.reshape(-1, D) for d in dys), z.reshape(-1, D),
                                                 u.reshape(-1, D) if drop else None, float(p_u) if drop else 0.0,
                                                 gamma, mean.reshape(-1), rstd.reshape(-1), True)
        dx.reshape(-1, D)[...] = out[0]
        if drop:
            ds.reshape(-1, D)[...] = out[1]
        partial[...] = 0
        partial[0] = np.stack(out[2:])
    return rows


@pytest.fixture
def launcher_on_numpy(monkeypatch):
    monkeypatch.setattr(cupy_launch, "sm_count", lambda: 2)
    return on_numpy(monkeypatch, cupy_launch, _emulated_kernel)


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("p,two,with_bias", [(0.0, True, True), (0.2, False, False)])
def test_gpu_launcher_adds_two_gradients_and_hands_back_float32_sums(launcher_on_numpy, dtype, p, two, with_bias):
    args = inputs(np.random.default_rng(2), (5, 3, 8), dtype, p, two) + (with_bias,)
    got = launcher_on_numpy.dropout_add_layernorm_backward(*args)
    want = dropout_add_layernorm_backward_ref(*args)
    assert (got[1] is got[0]) == (p == 0.0) and (got[4] is None) == (not with_bias)
    for name, a, b in zip(("dx", "ds", "dgamma", "dbeta", "dbias"), got, want):
        if b is not None:
            assert a.dtype == b.dtype and a.shape == b.shape, name
            assert_close(as_float64(a), as_float64(b), name, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="one or two"):
        launcher_on_numpy.dropout_add_layernorm_backward(args[0] * 3, *args[1:])
