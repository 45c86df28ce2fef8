"""softmax_forward on the GPU: every CUDA version, dtype, odd shape, mask layout and block size
against the NumPy reference. Skipped (visibly) without CuPy and a working GPU.

Shapes: B batch, H heads, T queries, L keys; x is (B, H, T, L) attention scores.
"""
import numpy as np
import pytest

from minitensor.dtypes import BF16
from minitensor.kernels.bf16_cast.reference import float_to_bf16
from minitensor.kernels.softmax_forward import cupy_launch
from minitensor.kernels.softmax_forward.reference import softmax_forward_ref
from minitensor.testing import assert_close
from tests.minitensor.kernels._gpu import GPU_MARKS, cp, poison_pool, to_gpu

pytestmark = GPU_MARKS

DTYPES = [np.float32, np.float16, np.float64]
CASES = [(v, block) for v, blocks in cupy_launch.BLOCKS.items() for block in blocks]
SHAPES_AND_MASKS = [  # (x shape, mask shape or None)
    ((1, 1), None),
    ((7, 33), (7, 33)),
    ((2, 3, 5, 17), (2, 1, 1, 17)),  # padding mask (B, 1, 1, L); row 0 fully blocked below
    ((2, 3, 9, 9), "causal"),  # (1, 1, T, L)
    ((2, 3, 5, 100), (2, 1, 5, 100)),  # (B, 1, T, L)
    ((5, 100), (100,)),  # fewer mask axes than x
    ((2, 2, 3, 4, 6), (2, 1, 1, 1, 6)),  # more than 4 axes
    ((3, 1025), None),  # longer than v3's registers: falls back to v2
    ((2, 2000), (1, 2000)),
]


def _mask(rng, x_shape, mask_shape):
    if mask_shape is None:
        return None
    if mask_shape == "causal":
        T, L = x_shape[-2:]
        return np.triu(np.ones((T, L), dtype=bool), k=1)[None, None]  # (1, 1, T, L)
    mask = rng.random(mask_shape) < 0.3
    mask.reshape(-1, mask_shape[-1])[0] = True  # one fully blocked row -> zeros, not NaN
    return mask


@pytest.mark.parametrize("version,block", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,mask_shape", SHAPES_AND_MASKS)
def test_softmax_forward_gpu_matches_reference(version, block, dtype, shape, mask_shape):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    mask = _mask(rng, shape, mask_shape)
    poison_pool((shape, dtype))
    x_gpu, mask_gpu = to_gpu(x, mask)
    y = cupy_launch.VERSIONS[version](x_gpu, 0.7, mask_gpu, block=block)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert_close(y, softmax_forward_ref(x, 0.7, mask), f"softmax_forward v{version} block {block}")


def test_softmax_forward_gpu_default_wrapper_and_empty():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 8, 8)).astype(np.float32)
    y = cupy_launch.softmax_forward(cp.asarray(x), 0.125, None)
    assert_close(y, softmax_forward_ref(x, 0.125, None), "softmax_forward DEFAULT")
    assert cupy_launch.softmax_forward(cp.zeros((0, 5), cp.float32), 1.0, None).shape == (0, 5)


def test_softmax_forward_gpu_rejects_integer_input():
    with pytest.raises(TypeError):
        cupy_launch.softmax_forward(cp.zeros((2, 3), cp.int32), 1.0, None)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_forward_numba_cuda_on_device(dtype):
    from minitensor.kernels.softmax_forward import numba_cuda

    rng = np.random.default_rng(2)
    x = (rng.standard_normal((2, 3, 5, 40)) * 4).astype(dtype)
    mask = _mask(rng, x.shape, (2, 1, 1, 40))
    x_gpu, mask_gpu = to_gpu(x, mask)
    y = numba_cuda.softmax_forward(x_gpu, 0.7, mask_gpu)
    assert_close(cp.asarray(y), softmax_forward_ref(x, 0.7, mask), "numba_cuda softmax_forward v1")


@pytest.mark.parametrize("version,block", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("L", [4, 40, 1100])  # one lane's worth, a warp's registers, v2's fallback
def test_softmax_forward_gpu_non_finite_rows_follow_the_reference(version, block, dtype, L):
    from tests.minitensor.kernels.test_softmax_forward import SPECIAL_ROWS

    x = np.array([np.resize(np.array(r), L) for r, _ in SPECIAL_ROWS] + [np.linspace(-2, 2, L)], dtype=dtype)
    mask = np.zeros((1, L), dtype=bool)
    mask[0, 1] = True
    for m in (None, mask):
        y = cupy_launch.VERSIONS[version](*to_gpu(x, m), 0.5, block=block)
        assert_close(y, softmax_forward_ref(x, 0.5, m), f"softmax_forward v{version} non-finite L={L}")


@pytest.mark.parametrize("version,block", CASES)
@pytest.mark.parametrize("shape,mask_shape", SHAPES_AND_MASKS[:6])
def test_softmax_forward_gpu_bf16(version, block, shape, mask_shape):
    rng = np.random.default_rng(3)
    x = float_to_bf16(rng.standard_normal(shape) * 4)
    mask = _mask(rng, shape, mask_shape)
    y = cupy_launch.VERSIONS[version](*to_gpu(x, mask), 0.7, block=block)
    assert y.dtype == BF16
    assert_close(y, softmax_forward_ref(x, 0.7, mask), f"softmax_forward v{version} bf16")
