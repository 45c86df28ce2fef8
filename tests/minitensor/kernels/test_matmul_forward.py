"""matmul_forward: the reference against the definition (runs without a GPU).

The CUDA teaching GEMMs are checked against this reference in test_matmul_forward_gpu.py.
Shapes: a (M, K), b (K, N) -> c (M, N).
"""
import numpy as np
import pytest

from minitensor.kernels.matmul_forward.reference import matmul_forward_ref
from minitensor.testing import assert_close


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_matmul_forward_ref_matches_the_definition(dtype):
    rng = np.random.default_rng(0)
    a = rng.integers(-3, 4, size=(5, 7)).astype(dtype)  # small integers: every sum is exact
    b = rng.integers(-3, 4, size=(7, 3)).astype(dtype)
    want = np.array([[sum(float(a[i, k]) * float(b[k, j]) for k in range(7)) for j in range(3)]
                     for i in range(5)])
    got = matmul_forward_ref(a, b)
    assert got.dtype == dtype
    assert_close(got, want.astype(dtype), "matmul_forward_ref", atol=0, rtol=0)
