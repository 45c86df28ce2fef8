"""embedding_backward: every Numba version vs the reference (repeated ids add up);
the reference vs a one-hot matrix product and on bf16 bits; the GPU launcher's host code on the
CPU (NumPy for CuPy, its kernels emulated): dout's dtype back, bf16 as bits, the NaN row.

Shapes: N tokens, D = d_model, E = num_embeddings.
"""
import sys
import types

import numpy as np
import pytest

from minitensor.dtypes import BF16
from minitensor.kernels.bf16_cast.reference import bf16_cast_ref, bf16_to_float32, float_to_bf16
from minitensor.kernels.embedding_backward import cupy_launch, numba_cpu
from minitensor.kernels.embedding_backward.reference import embedding_backward_ref
from tests.minitensor.kernels._close import as_dtype, assert_close

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


def test_embedding_backward_reference_takes_bf16_bits():
    """bf16 (uint16 bits) in, the sums rounded to bf16 bits out: the numbers, not the integers."""
    dout = float_to_bf16(np.array([[1.5, -2.25], [0.375, 3.0], [1.0, 1.0]]))
    got = embedding_backward_ref(dout, np.array([1, 0, 1]), 3)
    assert got.dtype == BF16
    np.testing.assert_array_equal(bf16_to_float32(got), [[0.375, 3.0], [2.5, -1.25], [0.0, 0.0]])


# ---- the GPU launcher's host code, run on the CPU ----------------------------------------------
def _emulated_kernel(name):
    """What cuda.cu's kernel `name` does (NumPy, on the arrays the launcher passes): the CUDA itself
    runs in test_embedding_backward_gpu.py; here the launcher's host code around it is checked."""
    def widen(x):
        return bf16_to_float32(x) if x.dtype == BF16 else x

    def v1(grid, block, args):  # atomics into the Acc<T> table; a bad id adds NaN to row 0
        dweight, dout, ids, _, _, num_embeddings = args
        good = (ids >= 0) & (ids < num_embeddings)
        np.add.at(dweight, ids[good], widen(dout[good]).astype(dweight.dtype))
        dweight[0] += np.nan if not good.all() else 0

    def v2(grid, block, args):  # one run of equal sorted ids -> its row, stored in T
        dweight, dout, order, sorted_ids, run_start, runs, n, _, num_embeddings = args
        for run in range(runs):
            start, end = run_start[run], run_start[run + 1] if run + 1 < runs else n
            row = sorted_ids[start]
            if 0 <= row < num_embeddings:
                total = widen(dout[order[start:end]]).astype(np.float32).sum(axis=0)
                dweight[row] = float_to_bf16(total) if dweight.dtype == BF16 else total
    return {"v1": v1, "v2": v2}[name.split("<")[0].rsplit("_", 1)[1]]


@pytest.fixture
def launcher_on_numpy(monkeypatch):
    """embedding_backward/cupy_launch.py with NumPy standing in for CuPy, its kernels emulated and
    bf16_cast the reference's: what it allocates, sums in and hands back is its own code."""
    monkeypatch.setitem(sys.modules, "cupy", np)
    monkeypatch.setattr(cupy_launch, "CUDA", types.SimpleNamespace(function=_emulated_kernel))
    monkeypatch.setattr(cupy_launch, "bf16_cast", bf16_cast_ref, raising=False)
    return cupy_launch


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=["float32", "float16", "bf16"])
def test_gpu_launcher_hands_back_dout_dtype_bf16_as_bits(launcher_on_numpy, version, dtype):
    """bf16 sums come back as bf16 bits, rounded: a plain astype(uint16) would give 3 for 3.7."""
    rng = np.random.default_rng(3)
    dout = as_dtype(rng.standard_normal((40, 6)) * 3, dtype)
    ids = rng.integers(0, 5, size=40)
    got = launcher_on_numpy.VERSIONS[version](dout, ids, 7)
    assert got.dtype == np.dtype(dtype) and got.shape == (7, 6)
    want = embedding_backward_ref(dout, ids, 7)
    # bf16: sums of ~8 terms in float32, rounded once to bf16 (half a step: 2^-8 relative)
    assert_close(got, want, f"v{version} {np.dtype(dtype)}", atol=1e-2 if dtype != np.float32 else 1e-5,
                 rtol=2 ** -8 if dtype == BF16 else None)


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["float32", "bf16"])
def test_gpu_launcher_bad_id_makes_row_0_nan_in_bf16_too(launcher_on_numpy, version, dtype):
    dout = as_dtype(np.ones((3, 4)), dtype)
    got = launcher_on_numpy.VERSIONS[version](dout, np.array([1, 9, 2]), 3)
    values = bf16_to_float32(got) if dtype == BF16 else got
    assert np.isnan(values[0]).all() and np.isfinite(values[1:]).all()
