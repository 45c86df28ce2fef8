"""bias_relu_forward on the GPU: every CUDA version, dtype pair and block size against the NumPy reference.
Skipped (visibly) without CuPy and a working GPU.

Shapes: x (..., C), bias (C,).
"""
import numpy as np
import pytest

from minitensor.dtypes import BF16
from minitensor.kernels.bias_relu_forward import cupy_launch
from minitensor.kernels.bias_relu_forward.reference import bias_relu_forward_ref
from minitensor.testing import assert_close
from tests.minitensor.kernels._close import as_dtype
from tests.minitensor.kernels._gpu import GPU_MARKS, cp

pytestmark = GPU_MARKS

PAIRS = [(np.float32, np.float32), (np.float16, np.float16), (np.float16, np.float32), (BF16, BF16),
         (BF16, np.float32), (np.float64, np.float64)]
CASES = [(v, block) for v, blocks in cupy_launch.BLOCKS.items() for block in blocks]
SHAPES = [(1, 1), (7, 33), (2, 3, 100), (300, 2048), (70000, 3)]   # 70000 rows: more than one grid's height


@pytest.mark.parametrize("version,block", CASES)
@pytest.mark.parametrize("dtype,bias_dtype", PAIRS)
@pytest.mark.parametrize("shape", SHAPES)
def test_bias_relu_forward_gpu_matches_reference(version, block, dtype, bias_dtype, shape):
    rng = np.random.default_rng(0)
    x = as_dtype(rng.standard_normal(shape), dtype)
    bias = as_dtype(rng.standard_normal(shape[-1]), bias_dtype)
    want = bias_relu_forward_ref(x.copy(), bias)
    got = cupy_launch.VERSIONS[version](cp.asarray(x), cp.asarray(bias), block=block).get()
    assert got.dtype == want.dtype
    if np.dtype(dtype) == BF16:                       # x + b exact in float32 for bf16 x: one rounding, as the reference
        np.testing.assert_array_equal(got, want)
    else:
        assert_close(got, want, f"v{version} block {block}", atol=1e-6, rtol=1e-3 if dtype == np.float16 else 1e-6)
