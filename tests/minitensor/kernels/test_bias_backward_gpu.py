"""bias_backward on the GPU: every CUDA version, dtype, ReLU mask or none, against the NumPy reference, and
the default's sums bit for bit the same twice. Skipped (visibly) without CuPy and a working GPU.

Shapes: dy (G, R, C) or (R, C).
"""
import numpy as np
import pytest

from minitensor.dtypes import BF16
from minitensor.kernels.bias_backward import cupy_launch
from minitensor.kernels.bias_backward.reference import bias_backward_ref
from minitensor.kernels.bf16_cast.reference import as_float64
from minitensor.testing import assert_close
from tests.minitensor.kernels._close import as_dtype
from tests.minitensor.kernels._gpu import GPU_MARKS, cp

pytestmark = GPU_MARKS

DTYPES = [np.float32, np.float16, np.float64, BF16]
SHAPES = [(1, 1), (7, 33), (3, 40, 12), (25000, 512), (2, 300, 2048)]


@pytest.mark.parametrize("version", sorted(cupy_launch.VERSIONS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_bias_backward_gpu_matches_reference(version, dtype, relu, shape):
    rng = np.random.default_rng(0)
    dy = as_dtype(rng.standard_normal(shape), dtype)
    y = as_dtype(np.maximum(rng.standard_normal(shape), 0), dtype) if relu else None
    acc = np.float64 if dtype == np.float64 else np.float32
    dx, db = cupy_launch.VERSIONS[version](cp.asarray(dy), None if y is None else cp.asarray(y), acc)
    dx_ref, db_ref = bias_backward_ref(dy, y, acc)
    np.testing.assert_array_equal(dx.get(), dx_ref)
    rows = shape[-2]
    assert_close(db.get(), db_ref, f"v{version} db", atol=1e-5 * np.sqrt(rows) if acc == np.float32 else 1e-9,
                 rtol=1e-5 if acc == np.float32 else 1e-10)


def test_bias_backward_gpu_default_is_deterministic():
    dy = cp.asarray(as_dtype(np.random.default_rng(1).standard_normal((25000, 512)), BF16))
    first, second = (cupy_launch.bias_backward(dy, None, np.float32)[1] for _ in range(2))
    assert bool((first == second).all()), "a fixed summation order"
    np.testing.assert_allclose(first.get(), as_float64(dy.get()).sum(axis=0), atol=0.05)
