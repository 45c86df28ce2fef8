"""matmul_forward teaching GEMMs on the GPU: every version with odd shapes against the reference.
Skipped (visibly) without CuPy and a working GPU.

Shapes: a (M, K), b (K, N) -> c (M, N).
"""
import numpy as np
import pytest

from minitensor.kernels.matmul_forward import cupy_launch
from minitensor.kernels.matmul_forward.reference import matmul_forward_ref
from minitensor.testing import assert_close
from tests.minitensor.kernels._gpu import GPU_MARKS, cp, poison_pool, to_gpu

pytestmark = GPU_MARKS

CASES = [(v, np.dtype(d)) for v, dtypes in cupy_launch.DTYPES.items() for d in dtypes]
SHAPES = [(1, 1, 1), (7, 13, 5), (33, 65, 17), (128, 128, 128), (130, 72, 200), (257, 300, 129),
          (512, 256, 384)]  # (M, K, N)


@pytest.mark.parametrize("version,dtype", CASES)
@pytest.mark.parametrize("M,K,N", SHAPES)
def test_matmul_forward_gpu_matches_float64(version, dtype, M, K, N):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype(dtype)
    b = rng.standard_normal((K, N)).astype(dtype)
    ref = matmul_forward_ref(a, b)  # (M, N), float64 sums of the rounded inputs
    poison_pool(((M, N), dtype))
    c = cupy_launch.VERSIONS[version](*to_gpu(a, b))
    assert c.dtype == dtype and c.shape == (M, N)
    # |c| ~ sqrt(K): float32 sums lose ~K*eps, float16 output rounds to ~5e-4 relative
    atol = 1e-5 * np.sqrt(K) if dtype == np.float32 else 2e-2
    assert_close(c, ref, f"matmul_forward v{version} {dtype}", atol=atol,
                 rtol=1e-5 if dtype == np.float32 else 1e-2)


def test_matmul_forward_gpu_names_and_type_errors():
    assert set(cupy_launch.NAMES.values()) == set(cupy_launch.VERSIONS)
    a = cp.ones((4, 8), cp.float16)
    with pytest.raises(TypeError):
        cupy_launch.VERSIONS[cupy_launch.NAMES["register_tiled"]](a, a.T.copy())
    with pytest.raises(TypeError):
        cupy_launch.VERSIONS[cupy_launch.NAMES["tensor_core_fp16"]](a.astype(cp.float32), a.T.astype(cp.float32))
    c = cupy_launch.matmul_forward(a, cp.ones((8, 3), cp.float16))  # DEFAULT: cuBLAS
    assert_close(c, np.full((4, 3), 8.0, np.float16), "matmul_forward DEFAULT")
