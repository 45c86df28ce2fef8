"""cupy_blas without a GPU: its plans (layouts, transpose flags, leading dimensions, batch strides,
the column-major swap) run through cupy_blas.numpy_gemm, which does on NumPy arrays exactly the
call cuBLAS would get and refuses to read outside an operand's buffer, and must give np.matmul's
numbers; transposed and sliced operands must be read in place (no copy), the rest copied.

Shapes: a (..., M, K), b (..., K, N) or (K, N); B batch, H heads, T rows, d columns.
"""
import numpy as np
import pytest

from minitensor.backends import cupy_blas
from minitensor.backends.counting import CountingBackend
from minitensor.dtypes import BF16
from minitensor.kernels.bf16_cast.reference import bf16_to_float32, float_to_bf16
from minitensor.testing import assert_close


def _half(x, dtype):
    return float_to_bf16(x) if dtype == BF16 else x.astype(dtype)


def _values(x):
    return bf16_to_float32(x).astype(np.float64) if x.dtype == BF16 else x.astype(np.float64)


def _split_heads(x, h):
    B, T, width = x.shape
    return x.reshape(B, T, h, width // h).transpose(0, 2, 1, 3)      # (B, H, T, d), not one batch stride


# name -> (make a, make b, copies cuBLAS needs); each maker gets (rng, dtype)
R = np.random.default_rng(0)


def _arr(shape, dtype):
    return _half(R.standard_normal(shape), dtype)


CASES = {
    "2d rows x rows": (lambda t: _arr((5, 7), t), lambda t: _arr((7, 3), t), 0),
    "b transposed": (lambda t: _arr((5, 7), t), lambda t: _arr((3, 7), t).T, 0),
    "a transposed": (lambda t: _arr((7, 5), t).T, lambda t: _arr((7, 3), t), 0),
    "both transposed": (lambda t: _arr((7, 5), t).T, lambda t: _arr((3, 7), t).T, 0),
    "a columns sliced (ld > K)": (lambda t: _arr((5, 11), t)[:, 2:9], lambda t: _arr((7, 3), t), 0),
    "b rows sliced": (lambda t: _arr((5, 7), t), lambda t: _arr((10, 3), t)[1:8], 0),
    "row vector times matrix": (lambda t: _arr((1, 7), t), lambda t: _arr((7, 4), t), 0),
    "matrix times column": (lambda t: _arr((5, 7), t), lambda t: _arr((7, 1), t), 0),
    "K = 1": (lambda t: _arr((5, 1), t), lambda t: _arr((1, 4), t), 0),
    "batched": (lambda t: _arr((3, 5, 7), t), lambda t: _arr((3, 7, 4), t), 0),
    "batched times shared": (lambda t: _arr((3, 5, 7), t), lambda t: _arr((7, 4), t), 0),
    "shared times batched": (lambda t: _arr((5, 7), t), lambda t: _arr((3, 7, 4), t), 0),
    "heads: Q Kᵀ": (lambda t: _arr((2, 3, 5, 4), t), lambda t: np.swapaxes(_arr((2, 3, 6, 4), t), -1, -2), 0),
    "heads: Sᵀ Q": (lambda t: np.swapaxes(_arr((2, 3, 6, 5), t), -1, -2), lambda t: _arr((2, 3, 6, 4), t), 0),
    "split-head views": (lambda t: _split_heads(_arr((2, 5, 12), t), 3),
                         lambda t: np.swapaxes(_split_heads(_arr((2, 6, 12), t), 3), -1, -2), 2),
    "a neither row- nor column-major": (lambda t: _arr((5, 14), t)[:, ::2], lambda t: _arr((7, 3), t), 1),
    "broadcast batch": (lambda t: _arr((1, 3, 5, 7), t), lambda t: _arr((2, 3, 7, 4), t), 1),
}


def over_every_plan(test):
    """Run `test` for every CASES entry, fp16 and bf16, out in their dtype, in float32, or plus a bias."""
    for mark in (pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["fp16", "bf16"]),
                 pytest.mark.parametrize("case", sorted(CASES)),
                 pytest.mark.parametrize("out", ["same", "float32", "bias"])):
        test = mark(test)
    return test


@over_every_plan
def test_every_plan_computes_np_matmul_and_copies_only_what_it_must(case, dtype, out):
    make_a, make_b, copies = CASES[case]
    a, b = make_a(dtype), make_b(dtype)
    backend = CountingBackend()
    xp = backend.xp
    a_dev, b_dev = a.view(xp.ndarray), b.view(xp.ndarray)             # the same memory, views kept
    bias = _half(R.standard_normal(b.shape[-1]), dtype) if out == "bias" else None
    out_dtype = np.float32 if out == "float32" else None
    calls = []

    def gemm(*args):
        calls.append(args)
        cupy_blas.numpy_gemm(*args)

    backend.counts.clear()
    c = cupy_blas.matmul(a_dev, b_dev, out_dtype, None if bias is None else bias.view(xp.ndarray), xp=xp, gemm=gemm)
    want = _values(a) @ _values(b) + (0 if bias is None else _values(bias))
    assert c.shape == want.shape and c.dtype == np.dtype(out_dtype or dtype)
    assert len(calls) == 1, "one cuBLAS call per product"
    assert_close(c.view(np.ndarray), _half(want, c.dtype) if c.dtype != np.float32 else want.astype(np.float32),
                 f"{case} {np.dtype(dtype)} {out}", dtype=np.float32, atol=2e-2, rtol=2e-2)
    made = backend.counts.by_kind.get("astype", 0) + backend.counts.by_kind.get("reshape copy", 0) \
        + backend.counts.by_kind.get("function ascontiguousarray", 0)
    assert made == copies, f"{case}: {made} operand copies, expected {copies}"


def test_transposed_operands_get_the_transpose_flag_and_the_column_major_swap():
    a = np.zeros((5, 7), np.float16)
    bt = np.zeros((3, 7), np.float16)                                  # b = btᵀ: (7, 3) stored column-major
    calls = []
    cupy_blas.matmul(a, bt.T, xp=np, gemm=lambda *args: calls.append(args))
    op_a, op_b, m, n, k, A, lda, _, B, ldb, _, beta, C, ldc, _, batch = calls[0]
    assert (op_a, op_b) == (cupy_blas.OP_T, cupy_blas.OP_N)            # cuBLAS's first operand is b
    assert (m, n, k, lda, ldb, ldc, batch, beta) == (3, 5, 7, 7, 7, 3, 1, 0.0)
    assert A.base is bt or A.base is bt.base and B is a


@pytest.mark.parametrize("shape,strides,want", [
    ((4, 3), (24, 8), (False, 3)),           # row-major
    ((4, 3), (8, 32), (True, 4)),            # column-major (a transposed view)
    ((4, 3), (40, 8), (False, 5)),           # rows 5 apart: a column slice
    ((1, 3), (0, 8), (False, 3)),            # one row: any row stride
    ((4, 1), (8, 0), (False, 1)),            # one column
    ((4, 3), (16, 16), None),                # neither
    ((4, 3), (-24, 8), None),                # negative strides
])
def test_matrix_layout(shape, strides, want):
    assert cupy_blas.matrix_layout(shape, strides, 8) == want


def test_batch_stride_walks_leading_axes_in_c_order_or_gives_none():
    assert cupy_blas.batch_stride((2, 3), (3 * 20 * 4, 20 * 4), 4) == 20       # contiguous (B, H)
    assert cupy_blas.batch_stride((1, 3), (999, 80), 4) == 20                  # unit axes do not count
    assert cupy_blas.batch_stride((2, 3), (5 * 12 * 4, 4 * 4), 4) is None      # split heads: two strides
    assert cupy_blas.batch_stride((), (), 4) == 0


def test_numpy_gemm_refuses_a_plan_that_reads_outside_the_operand():
    a, b, c = np.zeros((4, 3), np.float16), np.zeros((3, 2), np.float16), np.zeros((4, 2), np.float16)
    with pytest.raises(ValueError, match="outside"):
        cupy_blas.numpy_gemm(0, 0, 2, 4, 3, b, 5, 0, a, 3, 0, 0.0, c, 2, 0, 1)   # ldb 5 > b's 2 columns
    with pytest.raises(TypeError):
        cupy_blas.matmul(a.astype(np.float32), b, xp=np, gemm=cupy_blas.numpy_gemm)     # two dtypes
    with pytest.raises(TypeError):
        cupy_blas.matmul(a.astype(np.int32), b.astype(np.int32), xp=np, gemm=cupy_blas.numpy_gemm)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", sorted(CASES))
def test_float32_and_float64_plans_compute_np_matmul(case, dtype):
    make_a, make_b, _ = CASES[case]
    a, b = make_a(np.float64).astype(dtype), make_b(np.float64).astype(dtype)
    c = cupy_blas.matmul(a, b, xp=np, gemm=cupy_blas.numpy_gemm)
    assert c.dtype == dtype
    assert_close(c, (a.astype(np.float64) @ b.astype(np.float64)).astype(dtype), case, dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["fp32", "bf16"])
def test_out_writes_each_head_into_its_slot_of_a_wider_array_and_accumulates(dtype):
    """Time-major heads: the (B, H, T, K) view of a (T, B, H·K) array is rows B·H·K apart, heads K apart:
    cuBLAS writes there in place; accumulate adds to what is there (beta = 1)."""
    T, B, H, K, M = 5, 2, 3, 4, 6
    wide = _half(np.zeros((T, B, H * K)), dtype)
    heads = wide.reshape(T, B, H, K).transpose(1, 2, 0, 3)                # (B, H, T, K), no copy
    a, b = _arr((B, H, T, M), dtype), _arr((B, H, M, K), dtype)
    backend = CountingBackend()
    out = heads.view(backend.xp.ndarray)
    got = cupy_blas.matmul(a.view(backend.xp.ndarray), b.view(backend.xp.ndarray), xp=backend.xp,
                           gemm=backend.gemm, out=out)
    assert got is out and backend.counts.launches == 1                    # one GEMM, no copy
    want = _values(a) @ _values(b)
    assert_close(_values(heads), want, "heads written in place", dtype=np.float32, atol=2e-2, rtol=2e-2)
    cupy_blas.matmul(a, b, xp=np, gemm=cupy_blas.numpy_gemm, out=heads, accumulate=True)
    assert_close(_values(heads), 2 * want, "accumulated", dtype=np.float32, atol=5e-2, rtol=2e-2)
    with pytest.raises(ValueError, match="row-major"):
        cupy_blas.matmul(a, b, xp=np, gemm=cupy_blas.numpy_gemm, out=np.swapaxes(heads, -1, -2)[..., :K, :T])


def test_each_layout_is_planned_once_and_replayed(monkeypatch):
    plans, planned = {}, []
    real_plan = cupy_blas.plan
    monkeypatch.setattr(cupy_blas, "plan", lambda *args, **kwargs: planned.append(args) or real_plan(*args, **kwargs))
    a, b = _arr((5, 7), np.float16), _arr((3, 7), np.float16).T
    first = cupy_blas.matmul(a, b, xp=np, gemm=cupy_blas.numpy_gemm, plans=plans)
    again = cupy_blas.matmul(a.copy(), np.ascontiguousarray(b.T).T, xp=np, gemm=cupy_blas.numpy_gemm, plans=plans)
    np.testing.assert_array_equal(first, again)
    assert len(planned) == 1 and len(plans) == 1                           # same shapes, strides, dtypes: replayed
    cupy_blas.matmul(a, np.ascontiguousarray(b), xp=np, gemm=cupy_blas.numpy_gemm, plans=plans)
    assert len(planned) == 2                                               # another layout: planned
