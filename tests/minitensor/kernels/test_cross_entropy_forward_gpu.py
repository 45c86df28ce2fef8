"""cross_entropy_forward on the GPU: every CUDA version, dtype, odd shape, smoothing/ignore_index
setting and block size against the NumPy reference (loss, nll, dlogits). Skipped (visibly) without a GPU.

Shapes: N = rows, V = classes.
"""
import numpy as np
import pytest

from minitensor.kernels.cross_entropy_forward import cupy_launch
from minitensor.kernels.cross_entropy_forward.reference import cross_entropy_forward_ref
from minitensor.testing import assert_close
from tests.minitensor.kernels._gpu import GPU_MARKS, cp, poison_pool, to_gpu

pytestmark = GPU_MARKS

DTYPES = [np.float32, np.float16, np.float64]
CASES = [(v, block) for v, blocks in cupy_launch.BLOCKS.items() for block in blocks]
SHAPES = [(1, 2), (7, 33), (16, 1000), (5, 3001)]
SMOOTHING = [(0.1, 0), (0.1, None), (0.0, 1)]  # (smoothing, ignore_index)


def _check(got, ref, name):
    loss, nll, dlogits = got
    assert loss.dtype == ref[0].dtype and dlogits.dtype == ref[2].dtype
    assert_close(loss, ref[0], f"{name} loss")
    assert_close(nll, ref[1], f"{name} nll")
    assert_close(dlogits, ref[2], f"{name} dlogits")


@pytest.mark.parametrize("version,block", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("smoothing,ignore_index", SMOOTHING)
def test_cross_entropy_forward_gpu_matches_reference(version, block, dtype, shape, smoothing, ignore_index):
    rng = np.random.default_rng(0)
    N, V = shape
    logits = (rng.standard_normal(shape) * 3).astype(dtype)
    targets = rng.integers(0, V, size=N)
    if ignore_index is not None and V > 2:
        targets[::3] = ignore_index  # some ignored rows: all zeros
    stats = np.float64 if dtype == np.float64 else np.float32
    poison_pool((shape, dtype), ((N,), stats), ((N,), stats))
    got = cupy_launch.VERSIONS[version](*to_gpu(logits, targets), smoothing, ignore_index, block=block)
    ref = cross_entropy_forward_ref(logits, targets, smoothing, ignore_index)
    _check(got, ref, f"cross_entropy_forward v{version} block {block}")


def test_cross_entropy_forward_gpu_default_wrapper_int32_targets():
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((9, 50)).astype(np.float32)
    targets = rng.integers(0, 50, size=9).astype(np.int32)
    got = cupy_launch.cross_entropy_forward(cp.asarray(logits), cp.asarray(targets), 0.1, 3)
    _check(got, cross_entropy_forward_ref(logits, targets, 0.1, 3), "cross_entropy_forward DEFAULT")


@pytest.mark.parametrize("version,block", CASES)
def test_cross_entropy_forward_gpu_bad_target_gives_a_nan_row_and_reads_nothing_else(version, block):
    """A target outside [0, V) (not ignore_index): NaN loss, nll and dlogits in its row only."""
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((4, 37)).astype(np.float32)
    targets = np.array([3, 37, 0, -5])                     # row 1 and row 3 are out of range; row 2 ignored
    loss, nll, dlogits = (a.get() for a in cupy_launch.VERSIONS[version](*to_gpu(logits, targets), 0.1, 0,
                                                                         block=block))
    assert np.isnan(loss[[1, 3]]).all() and np.isnan(nll[[1, 3]]).all() and np.isnan(dlogits[[1, 3]]).all()
    ok = np.array([3, 1, 0, 1])
    ref = cross_entropy_forward_ref(logits, ok, 0.1, 0)
    for got, want in zip((loss, nll, dlogits), ref):
        assert_close(got[[0, 2]], want[[0, 2]], f"cross_entropy v{version} rows beside the bad ones")
