"""layernorm_backward on the GPU: every CUDA version, dtype, odd shape and block size against the
NumPy reference (dx, dgamma, dbeta). Skipped (visibly) without CuPy and a working GPU.

Shapes: D = d_model; leading axes are any batch of rows.
"""
import numpy as np
import pytest

from minitensor.kernels.layernorm_backward import cupy_launch
from minitensor.kernels.layernorm_backward.reference import layernorm_backward_ref
from minitensor.kernels.layernorm_forward.reference import layernorm_forward_ref
from minitensor.testing import assert_close
from minitensor.dtypes import BF16
from tests.minitensor.kernels._close import as_dtype
from tests.minitensor.kernels._gpu import GPU_MARKS, cp, poison_pool, to_gpu

pytestmark = GPU_MARKS

DTYPES = [np.float32, np.float16, np.float64, BF16]
CASES = [(v, block) for v, blocks in cupy_launch.BLOCKS.items() for block in blocks]
SHAPES = [(1, 1), (7, 33), (2, 3, 100), (300, 512), (3, 1025), (2, 2000)]


def _inputs(rng, shape, dtype):
    x = as_dtype(rng.standard_normal(shape) * 2 + 1, dtype)
    gamma = rng.standard_normal(shape[-1]).astype(np.float32)
    _, mean, rstd = layernorm_forward_ref(x, gamma, gamma, 1e-5)
    dy = as_dtype(rng.standard_normal(shape), dtype)
    return dy, x, gamma, mean, rstd


def _check(got, inputs, name):
    dx, dgamma, dbeta = got
    dx_ref, dgamma_ref, dbeta_ref = layernorm_backward_ref(*inputs)
    assert dx.dtype == dx_ref.dtype and dgamma.dtype == dgamma_ref.dtype
    rows = max(int(np.prod(inputs[1].shape[:-1])), 1)
    # sums over rows in float32: error grows like sqrt(rows) * eps * |terms|
    sum_atol = 1e-6 * np.sqrt(rows) * 10 if dgamma.dtype == np.float32 else None
    assert_close(dx, dx_ref, f"{name} dx", atol=1e-5 if dx.dtype == np.float32 else None)
    assert_close(dgamma, dgamma_ref, f"{name} dgamma", atol=sum_atol)
    assert_close(dbeta, dbeta_ref, f"{name} dbeta", atol=sum_atol)


@pytest.mark.parametrize("version,block", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_layernorm_backward_gpu_matches_reference(version, block, dtype, shape):
    inputs = _inputs(np.random.default_rng(0), shape, dtype)
    poison_pool((shape, dtype), (shape[-1:], np.float32), (shape[-1:], np.float32))
    got = cupy_launch.VERSIONS[version](*to_gpu(*inputs), block=block)
    _check(got, inputs, f"layernorm_backward v{version} block {block}")


def test_layernorm_backward_gpu_default_wrapper_is_deterministic():
    inputs = _inputs(np.random.default_rng(1), (1000, 512), np.float32)
    first = cupy_launch.layernorm_backward(*to_gpu(*inputs))
    _check(first, inputs, "layernorm_backward DEFAULT")
    second = cupy_launch.layernorm_backward(*to_gpu(*inputs))
    assert all(bool((a == b).all()) for a, b in zip(first, second)), "fixed summation order"
