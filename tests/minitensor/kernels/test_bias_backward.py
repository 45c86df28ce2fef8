"""bias_backward: every Numba version vs the reference (through a ReLU or not, with leading batch axes); the
reference vs Σ_rows dy; the GPU launcher's host code on the CPU (NumPy for CuPy, its kernels emulated).

Shapes: G leading (batch) entries, R rows, C columns: dy (G, R, C) or (R, C) -> db (G, C) or (C,).
"""
import numpy as np
import pytest

from minitensor.dtypes import BF16
from minitensor.kernels.bf16_cast.reference import as_float64
from minitensor.kernels.bias_backward import cupy_launch, numba_cpu
from minitensor.kernels.bias_backward.reference import bias_backward_ref
from tests.minitensor.kernels._close import as_dtype, assert_close
from tests.minitensor.kernels._gpu import launcher_on_numpy as on_numpy

SHAPES = [(1, 1), (7, 5), (300, 17), (3, 40, 12), (600, 2048)]


@pytest.mark.parametrize("version", sorted(numba_cpu.VERSIONS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_bias_backward_matches_reference(monkeypatch, version, dtype, relu, shape):
    monkeypatch.setattr(numba_cpu, "DEFAULT", version)
    rng = np.random.default_rng(0)
    dy = rng.standard_normal(shape).astype(dtype)
    y = np.maximum(rng.standard_normal(shape), 0).astype(dtype) if relu else None
    dx, db = numba_cpu.bias_backward(dy, y, np.float32 if dtype == np.float32 else np.float64)
    dx_ref, db_ref = bias_backward_ref(dy, y, db.dtype)
    assert db.shape == shape[:-2] + shape[-1:] and db.dtype == db_ref.dtype
    assert (dx is dy) == (not relu)
    assert_close(dx, dx_ref, f"bias_backward v{version} dx")
    rows = shape[-2]
    assert_close(db, db_ref, f"bias_backward v{version} db", atol=1e-6 * np.sqrt(rows) * 10 if dtype == np.float32 else None)


def test_bias_backward_reference_is_the_column_sum_of_the_masked_gradient():
    dy = np.array([[1.0, 2.0], [3.0, -4.0], [5.0, 6.0]])
    y = np.array([[0.0, 1.0], [2.0, 0.0], [1.0, 1.0]])
    dx, db = bias_backward_ref(dy, y, np.float32)
    np.testing.assert_array_equal(dx, [[0.0, 2.0], [3.0, 0.0], [5.0, 6.0]])
    np.testing.assert_array_equal(db, [8.0, 8.0])
    assert db.dtype == np.float32
    dx, db = bias_backward_ref(dy, None, np.float64)
    assert dx is dy and db.tolist() == [9.0, 4.0]


# ---- the GPU launcher's host code, run on the CPU ----------------------------------------------
def _emulated_kernel(name):
    """What cuda.cu's kernel `name` does to the arrays the launcher passes (the CUDA runs in *_gpu.py)."""
    masked = name.endswith("true>")

    def run(grid, block, args):
        dx, db, dy, relu_out, R, C = args[:6]
        R, C = int(R), int(C)
        d3 = dy.reshape(-1, R, C)
        if masked:
            d3 = np.where(as_float64(relu_out).reshape(d3.shape) > 0, d3, 0).astype(dy.dtype)
            dx.reshape(d3.shape)[...] = d3
        db.reshape(-1, C)[...] = as_float64(d3).sum(axis=1)   # bf16 bits read as their values
    return run


@pytest.fixture
def launcher_on_numpy(monkeypatch):
    return on_numpy(monkeypatch, cupy_launch, _emulated_kernel)


@pytest.mark.parametrize("version", sorted(cupy_launch.VERSIONS))
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("relu", [False, True])
def test_gpu_launcher_returns_dx_and_the_sums_in_the_masters_dtype(launcher_on_numpy, version, dtype, relu):
    rng = np.random.default_rng(2)
    dy = as_dtype(rng.standard_normal((3, 9, 5)), dtype)
    y = as_dtype(np.maximum(rng.standard_normal((3, 9, 5)), 0), dtype) if relu else None
    dx, db = launcher_on_numpy.VERSIONS[version](dy, y, np.float32)
    dx_ref, db_ref = bias_backward_ref(dy, y, np.float32)
    assert db.dtype == np.float32 and db.shape == (3, 5) and (dx is dy) == (not relu)
    np.testing.assert_array_equal(dx, dx_ref)
    assert_close(db, db_ref, "db", atol=1e-5)
    _, empty = launcher_on_numpy.VERSIONS[version](dy[:, :0], None, np.float32)   # no rows: sums of 0
    np.testing.assert_array_equal(empty, np.zeros((3, 5)))
