"""dropout_forward on the GPU: the CUDA version for every (x, u) dtype pair, odd shape, p and block
size against the NumPy reference. Skipped (visibly) without CuPy and a working GPU.

Shapes: any; u has x's shape.
"""
import numpy as np
import pytest

from minitensor.kernels.dropout_forward import cupy_launch
from minitensor.kernels.dropout_forward.reference import dropout_forward_ref
from minitensor.testing import assert_close
from minitensor.dtypes import BF16
from tests.minitensor.kernels._close import as_dtype
from tests.minitensor.kernels._gpu import GPU_MARKS, cp, poison_pool, to_gpu

pytestmark = GPU_MARKS

DTYPES = [np.float32, np.float16, np.float64]
CASES = [(v, block) for v, blocks in cupy_launch.BLOCKS.items() for block in blocks]
SHAPES = [(1,), (7, 33), (2, 3, 1001)]


@pytest.mark.parametrize("version,block", CASES)
@pytest.mark.parametrize("x_dtype", DTYPES + [BF16])
@pytest.mark.parametrize("u_dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 1.0])
def test_dropout_forward_gpu_matches_reference(version, block, x_dtype, u_dtype, shape, p):
    rng = np.random.default_rng(0)
    x = as_dtype(rng.standard_normal(shape), x_dtype)
    u = rng.random(shape).astype(u_dtype)
    u.ravel()[:1] = u_dtype(p)  # a draw exactly at p is kept (u >= p), in u's own dtype
    poison_pool((shape, x_dtype))
    y = cupy_launch.VERSIONS[version](*to_gpu(x, u), p, block=block)
    assert y.dtype == x.dtype
    assert_close(y, dropout_forward_ref(x, u, p), f"dropout_forward v{version} block {block} p={p}")


def test_dropout_forward_gpu_default_wrapper_keeps_about_1_minus_p():
    x = cp.ones(100_000, cp.float32)
    u = cp.random.default_rng(0).random(100_000, dtype=cp.float32)
    y = cupy_launch.dropout_forward(x, u, 0.1)
    kept = float((y != 0).mean())
    assert abs(kept - 0.9) < 0.01 and float(y.max()) == pytest.approx(1 / 0.9)


@pytest.mark.parametrize("x_dtype", DTYPES + [BF16])
def test_dropout_seeded_draws_the_uniforms_of_the_backend(x_dtype):
    """dropout_seeded(x, seed, p) == dropout_forward(x, CupyBackend.uniform(seed), p): one kernel, same mask."""
    import minitensor as mt

    x = cp.asarray(as_dtype(np.random.default_rng(1).standard_normal((3, 1001)), x_dtype))
    u = mt.get_backend("cuda").uniform(12345, x.shape, "float32")
    np.testing.assert_array_equal(cupy_launch.dropout_seeded(x, 12345, 0.1).get(),
                                  cupy_launch.dropout_forward(x, u, 0.1).get())
