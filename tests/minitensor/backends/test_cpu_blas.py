"""cpu_blas.accumulate: out += a @ b in one gemm call, against NumPy's out + a @ b, for every layout the
training step hands it (transposed views, a block of rows of a wider out, stacked weights with gaps);
and it declines, leaving out as it was, where BLAS cannot read the arrays."""
import numpy as np
import pytest

from minitensor.backends import cpu_blas

pytestmark = pytest.mark.skipif(not cpu_blas._gemms(), reason="NumPy here links no ILP64 OpenBLAS")


def _case(rng, dtype, name):
    def m(*shape):
        return rng.standard_normal(shape).astype(dtype)
    if name == "plain":
        return m(5, 4), m(4, 3), m(5, 3)
    if name == "a transposed":                          # dW = xᵀ dy
        return m(4, 5).T, m(4, 3), m(5, 3)
    if name == "b transposed":                          # dx = dy Wᵀ
        return m(5, 4), m(3, 4).T, m(5, 3)
    if name == "rows of out":                           # a block of a wider array's rows, a column slice too
        return m(5, 4), m(4, 3), m(9, 6)[2:7, 1:4]
    if name == "stacked":                               # (R, in) @ (n, in, out) with gaps between the weights
        flat = m(3 * 4 * 3 + 10)
        w = np.lib.stride_tricks.as_strided(flat, (3, 4, 3), (16 * flat.itemsize, 3 * flat.itemsize, flat.itemsize))
        return m(5, 4), w, m(3, 5, 3)
    raise ValueError(name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["plain", "a transposed", "b transposed", "rows of out", "stacked"])
def test_accumulate_adds_the_product_in_place(dtype, name):
    a, b, out = _case(np.random.default_rng(0), dtype, name)
    expected = out + np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert cpu_blas.accumulate(a, b, out)
    np.testing.assert_allclose(out, expected, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("case", ["int", "mixed dtypes", "strided columns", "one row"])
def test_accumulate_declines_what_blas_cannot_read(case):
    rng = np.random.default_rng(1)
    a, b, out = rng.standard_normal((5, 4)), rng.standard_normal((4, 3)), rng.standard_normal((5, 3))
    if case == "int":
        a, b, out = (x.astype(np.int64) for x in (a, b, out))
    elif case == "mixed dtypes":
        a = a.astype(np.float32)
    elif case == "strided columns":
        b = rng.standard_normal((4, 6))[:, ::2]
    else:
        a, out = a[:1], out[:1]
    before = out.copy()
    assert not cpu_blas.accumulate(a, b, out)
    np.testing.assert_array_equal(out, before)


def test_the_numba_backend_accumulates_through_blas(monkeypatch):
    """Backend.matmul(accumulate=True) on the Numba backend goes through cpu_blas, and its result is NumPy's."""
    import minitensor as mt
    backend = mt.get_backend("numba")
    calls = []
    real = cpu_blas.accumulate
    monkeypatch.setattr(cpu_blas, "accumulate", lambda a, b, out: calls.append(1) or real(a, b, out))
    rng = np.random.default_rng(2)
    a, b, out = (rng.standard_normal(s).astype(np.float32) for s in ((6, 5), (5, 4), (6, 4)))
    expected = out + a @ b
    backend.matmul(a, b, out=out, accumulate=True)
    assert calls == [1]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
