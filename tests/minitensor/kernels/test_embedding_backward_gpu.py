"""embedding_backward on the GPU: every CUDA version, dtype (bf16 as uint16 bits too), odd shape,
repeated ids and block size against the NumPy reference. Skipped (visibly) without CuPy and a
working GPU.

Shapes: N = looked-up tokens, D = d_model, V = num_embeddings (table rows).
"""
import numpy as np
import pytest

from minitensor.dtypes import BF16
from minitensor.kernels.bf16_cast.reference import bf16_to_float32
from minitensor.kernels.embedding_backward import cupy_launch
from minitensor.kernels.embedding_backward.reference import embedding_backward_ref
from minitensor.testing import assert_close
from tests.minitensor.kernels._close import as_dtype
from tests.minitensor.kernels._gpu import GPU_MARKS, cp, poison_pool, to_gpu

pytestmark = GPU_MARKS

DTYPES = [np.float32, np.float16, np.float64, BF16]
CASES = [(v, block) for v, blocks in cupy_launch.BLOCKS.items() for block in blocks]
SHAPES = [(1, 1, 1), (7, 33, 5), (500, 64, 37), (300, 600, 1000)]  # (N, D, V)


@pytest.mark.parametrize("version,block", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("N,D,V", SHAPES)
def test_embedding_backward_gpu_matches_reference(version, block, dtype, N, D, V):
    rng = np.random.default_rng(0)
    dout = as_dtype(rng.standard_normal((N, D)), dtype)
    ids = rng.integers(0, max(V // 3, 1), size=N)  # many repeats, and rows that stay zero
    poison_pool(((V, D), dtype))
    dweight = cupy_launch.VERSIONS[version](*to_gpu(dout, ids), V, block=block)
    assert dweight.dtype == dout.dtype and dweight.shape == (V, D)
    # sums of up to ~N/V*3 terms in float32 (rounded once to float16 or bf16 for those)
    assert_close(dweight, embedding_backward_ref(dout, ids, V), f"embedding_backward v{version} block {block}",
                 atol=1e-5 if dtype == np.float32 else None)


def test_embedding_backward_gpu_v2_is_deterministic():
    rng = np.random.default_rng(1)
    dout, ids = to_gpu(rng.standard_normal((4000, 64)).astype(np.float32), rng.integers(0, 10, size=4000))
    first, second = cupy_launch.launch_v2(dout, ids, 10), cupy_launch.launch_v2(dout, ids, 10)
    assert bool((first == second).all())
    assert cupy_launch.embedding_backward(dout[:0], ids[:0], 3).shape == (3, 64)


@pytest.mark.parametrize("version", sorted(cupy_launch.VERSIONS))
@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_embedding_backward_gpu_bad_id_makes_row_0_nan_and_writes_nowhere_else(version, dtype):
    rng = np.random.default_rng(6)
    dout = as_dtype(rng.standard_normal((5, 8)), dtype)
    ids = np.array([2, 9, 3, 2, -1])                        # 9 and -1 lie outside the 6 rows
    got = cupy_launch.VERSIONS[version](*to_gpu(dout, ids), 6).get()
    assert np.isnan(bf16_to_float32(got[0]) if dtype == BF16 else got[0]).all()
    want = embedding_backward_ref(dout[[0, 2, 3]], ids[[0, 2, 3]], 6)
    assert_close(got[1:], want[1:], f"embedding_backward v{version} rows 1..5")
