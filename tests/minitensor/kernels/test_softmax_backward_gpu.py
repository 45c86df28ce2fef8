"""softmax_backward on the GPU: every CUDA version, dtype, odd shape and block size against the
NumPy reference. Skipped (visibly) without CuPy and a working GPU.

Shapes: L = entries per row; leading axes are any batch of rows.
"""
import numpy as np
import pytest

from minitensor.kernels.softmax_backward import cupy_launch
from minitensor.kernels.softmax_backward.reference import softmax_backward_ref
from minitensor.kernels.softmax_forward.reference import softmax_forward_ref
from minitensor.testing import assert_close
from minitensor.dtypes import BF16
from tests.minitensor.kernels._close import as_dtype
from tests.minitensor.kernels._gpu import GPU_MARKS, cp, poison_pool, to_gpu

pytestmark = GPU_MARKS

DTYPES = [np.float32, np.float16, np.float64, BF16]
CASES = [(v, block) for v, blocks in cupy_launch.BLOCKS.items() for block in blocks]
SHAPES = [(1, 1), (7, 33), (2, 3, 5, 17), (2, 3, 9, 100), (3, 1025), (2, 2000)]


@pytest.mark.parametrize("version,block", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_backward_gpu_matches_reference(version, block, dtype, shape):
    rng = np.random.default_rng(0)
    mask = rng.random(shape) < 0.2  # blocked entries: y = 0, so dx must be 0 there
    y = as_dtype(softmax_forward_ref(rng.standard_normal(shape) * 3, 1.0, mask), dtype)
    dy = as_dtype(rng.standard_normal(shape), dtype)
    poison_pool((shape, dtype))
    dx = cupy_launch.VERSIONS[version](*to_gpu(y, dy), 0.7, block=block)
    assert dx.dtype == y.dtype and dx.shape == y.shape
    assert_close(dx, softmax_backward_ref(y, dy, 0.7), f"softmax_backward v{version} block {block}")


def test_softmax_backward_gpu_default_wrapper():
    rng = np.random.default_rng(1)
    y = softmax_forward_ref(rng.standard_normal((4, 8, 8)), 1.0, None).astype(np.float32)
    dy = rng.standard_normal((4, 8, 8)).astype(np.float32)
    dx = cupy_launch.softmax_backward(cp.asarray(y), cp.asarray(dy), 0.125)
    assert_close(dx, softmax_backward_ref(y, dy, 0.125), "softmax_backward DEFAULT")
