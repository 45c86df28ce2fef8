"""layernorm_forward on the GPU: every CUDA (and numba.cuda) version, dtype, odd shape and block
size against the NumPy reference, mean and rstd included. Skipped (visibly) without a GPU.

Shapes: D = d_model; leading axes are any batch of rows.
"""
import numpy as np
import pytest

from minitensor.kernels.layernorm_forward import cupy_launch
from minitensor.kernels.layernorm_forward.reference import layernorm_forward_ref
from minitensor.testing import assert_close
from minitensor.dtypes import BF16
from tests.minitensor.kernels._close import as_dtype
from tests.minitensor.kernels._gpu import GPU_MARKS, cp, poison_pool, to_gpu

pytestmark = GPU_MARKS

DTYPES = [np.float32, np.float16, np.float64, BF16]
CASES = [(v, block) for v, blocks in cupy_launch.BLOCKS.items() for block in blocks]
SHAPES = [(1, 1), (7, 33), (2, 3, 100), (5, 512), (3, 1025), (2, 2000)]


def _inputs(rng, shape, dtype):
    x = as_dtype(rng.standard_normal(shape) * 2 + 1, dtype)  # nonzero mean: tests the centring
    gamma = rng.standard_normal(shape[-1]).astype(np.float32)
    beta = rng.standard_normal(shape[-1]).astype(np.float32)
    return x, gamma, beta


def _check(got, x, gamma, beta, name):
    y, mean, rstd = got
    y_ref, mean_ref, rstd_ref = layernorm_forward_ref(x, gamma, beta, 1e-5)
    assert y.dtype == x.dtype and mean.dtype == mean_ref.dtype and mean.shape == x.shape[:-1]
    # atol 1e-5 for y: y = xhat*gamma + beta cancels to ~0 at O(1) magnitudes
    assert_close(y, y_ref, f"{name} y", atol=1e-5 if x.dtype == np.float32 else None)
    assert_close(mean, mean_ref, f"{name} mean")
    assert_close(rstd, rstd_ref, f"{name} rstd")


@pytest.mark.parametrize("version,block", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_layernorm_forward_gpu_matches_reference(version, block, dtype, shape):
    x, gamma, beta = _inputs(np.random.default_rng(0), shape, dtype)
    stats = np.float64 if dtype == np.float64 else np.float32
    poison_pool((shape, dtype), (shape[:-1], stats), (shape[:-1], stats))
    got = cupy_launch.VERSIONS[version](*to_gpu(x, gamma, beta), 1e-5, block=block)
    _check(got, x, gamma, beta, f"layernorm_forward v{version} block {block}")


def test_layernorm_forward_gpu_default_wrapper_and_float16_params():
    x, gamma, beta = _inputs(np.random.default_rng(1), (6, 64), np.float16)
    gamma, beta = gamma.astype(np.float16), beta.astype(np.float16)  # params in the input dtype
    _check(cupy_launch.layernorm_forward(*to_gpu(x, gamma, beta), 1e-5), x, gamma, beta, "DEFAULT")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layernorm_forward_numba_cuda_on_device(dtype):
    from minitensor.kernels.layernorm_forward import numba_cuda

    x, gamma, beta = _inputs(np.random.default_rng(2), (9, 70), dtype)
    got = numba_cuda.layernorm_forward(*to_gpu(x, gamma, beta), 1e-5)
    _check(tuple(cp.asarray(a) for a in got), x, gamma, beta, "numba_cuda v1")
