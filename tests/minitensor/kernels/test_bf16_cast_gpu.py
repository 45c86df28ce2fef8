"""bf16_cast on the GPU: every CUDA version, direction, float type, odd size and block size against
the NumPy reference, bit for bit (NaN, inf, ties and the carry into the exponent included), and
v2's fallback for views off a 16-byte boundary. Skipped (visibly) without CuPy and a working GPU.

Shapes: flat and 2-D, sizes around the 8-element packs of v2.
"""
import numpy as np
import pytest

from minitensor.dtypes import BF16
from minitensor.kernels.bf16_cast import cupy_launch
from minitensor.kernels.bf16_cast.reference import bf16_cast_ref
from tests.minitensor.kernels._gpu import GPU_MARKS, cp, poison_pool

pytestmark = GPU_MARKS

CASES = [(v, block) for v, blocks in cupy_launch.BLOCKS.items() for block in blocks]
SHAPES = [(1,), (7,), (8,), (9,), (3, 333), (100_003,)]


def _inputs(dtype, shape):
    x = (np.random.default_rng(0).standard_normal(shape) * 100).astype(dtype)
    specials = np.array([np.inf, -np.inf, np.nan, -0.0, 1e-40, 3.4e38, 1.00390625, 1.01171875])
    x.reshape(-1)[:min(x.size, specials.size)] = specials.astype(dtype)[:x.size]
    return x


@pytest.mark.parametrize("version,block", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_bf16_cast_gpu_matches_reference_bit_for_bit(version, block, dtype, shape):
    x = _inputs(dtype, shape)
    poison_pool((shape, BF16))
    bits = cupy_launch.VERSIONS[version](cp.asarray(x), BF16, block=block)
    want = bf16_cast_ref(x, BF16)
    assert bits.dtype == BF16
    np.testing.assert_array_equal(bits.get(), want)
    back = cupy_launch.VERSIONS[version](cp.asarray(want), dtype, block=block)
    np.testing.assert_array_equal(back.get(), bf16_cast_ref(want, dtype))


def test_bf16_cast_gpu_v2_on_a_misaligned_view_and_bad_dtypes():
    x = cp.asarray(_inputs(np.float32, (1001,)))[1:]                     # 4 bytes off the boundary
    np.testing.assert_array_equal(cupy_launch.launch_v2(x, BF16).get(), bf16_cast_ref(x.get(), BF16))
    with pytest.raises(TypeError):
        cupy_launch.bf16_cast(x, np.float64)
