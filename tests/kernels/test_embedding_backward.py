"""embedding_backward: every Numba version vs the reference (repeated ids add up);
the reference vs a one-hot matrix product.

Shapes: N tokens, D = d_model, E = num_embeddings.
"""
import numpy as np
import pytest

from minitensor.kernels.embedding_backward import numba_cpu
from minitensor.kernels.embedding_backward.reference import embedding_backward_ref
from tests.kernels._close import assert_close

CASES = [(1, 1, 1), (7, 5, 3), (33, 17, 1000), (64, 256, 10)]  # (N, D, E)


@pytest.mark.parametrize("version", sorted(numba_cpu.VERSIONS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,d,e", CASES)
def test_embedding_backward_matches_reference(monkeypatch, version, dtype, n, d, e):
    monkeypatch.setattr(numba_cpu, "DEFAULT", version)
    rng = np.random.default_rng(0)
    dout = rng.standard_normal((n, d)).astype(dtype)
    ids = rng.integers(0, min(e, 4), size=n)  # few distinct ids: many repeats
    got = numba_cpu.embedding_backward(dout, ids, e)
    assert got.dtype == dtype and got.shape == (e, d)
    assert_close(got, embedding_backward_ref(dout, ids, e), f"embedding_backward v{version}")


@pytest.mark.parametrize("kernel", [embedding_backward_ref, numba_cpu.embedding_backward], ids=["ref", "numba"])
@pytest.mark.parametrize("bad", [-1, 5])
def test_embedding_backward_rejects_out_of_range_ids(kernel, bad):
    """An id outside the table is an IndexError on the CPU (the GPU kernels NaN row 0 instead)."""
    with pytest.raises(IndexError):
        kernel(np.ones((3, 4), np.float32), np.array([0, bad, 1]), 5)


def test_embedding_backward_reference_matches_one_hot_product():
    """dweight = onehot(ids)^T @ dout, the matrix form of the scatter-add."""
    rng = np.random.default_rng(5)
    dout = rng.standard_normal((6, 4))
    ids = np.array([2, 0, 2, 2, 5, 0])
    one_hot = np.eye(7)[ids]  # (N, E)
    assert_close(embedding_backward_ref(dout, ids, 7), one_hot.T @ dout, "reference")
