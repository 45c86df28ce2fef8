"""Matrix products through cuBLAS directly: bf16, fp16 or fp32 operands with float32 sums (fp64: float64).

Why not cupy.matmul: for more than two dimensions it copies float16 operands to float32, runs
a float32 GEMM without tensor cores and casts the result back (cupy/_core/_routines_linalg.pyx,
`matmul`), it copies every operand that is not C-contiguous, and it knows no bfloat16. Here each
product is one cublasGemmEx (one matrix) or cublasGemmStridedBatchedEx call (a batch), with
CUBLAS_COMPUTE_32F (64F for float64); an operand that is a transposed view (swapaxes of the last
two axes) is passed with a transpose flag, and any operand or output whose matrices are rows a
fixed distance apart, one batch stride apart (a head's slice of a wider array), is read or
written where it lies, not copied.

cuBLAS is column-major. A row-major (R, C) matrix whose rows are ld elements apart is, read
column-major, the (C, R) matrix Xᵀ with leading dimension ld. So C = A B (row-major) runs as
Cᵀ = Bᵀ Aᵀ (column-major): cuBLAS's first operand is b, its second is a, with m = N, n = M,
k = K, and ldc = N for a contiguous (M, N) result. An operand stored column-major (a transposed
view) is already its own transpose to cuBLAS and goes in with CUBLAS_OP_T.

`plan` decides the layouts, the flags, the strides, once per (shapes, strides, dtypes): `matmul`
keeps each Plan in a dictionary and replays it (planning costs tens of µs of Python; a lookup
one). The call goes to a `gemm` function: `cublas_gemm` on the GPU, or `numpy_gemm`, which
does the same call on NumPy arrays (the counting backend's products, and the tests that check
every plan against np.matmul).
Shapes: a (..., M, K), b (..., K, N) or (K, N) shared by every batch entry; c (..., M, N).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..dtypes import BF16
from ..kernels.bf16_cast.reference import bf16_to_float32, float_to_bf16
from .base import root_array

OP_N, OP_T = 0, 1                           # cublasOperation_t
CUDA_TYPES = {np.dtype(np.float16): 2, BF16: 14, np.dtype(np.float32): 0,   # cudaDataType_t (library_types.h)
              np.dtype(np.float64): 1}
COMPUTE_32F, COMPUTE_64F = 68, 70           # cublasComputeType_t: float32 sums (float64 for float64 operands)
GEMM_DEFAULT = -1                           # cublasGemmAlgo_t: cuBLAS picks (tensor cores for 16-bit types)


@dataclass(frozen=True)
class Layout:
    """How cuBLAS reads one operand: transposed (stored column-major), leading dim, batch stride (elements)."""

    transposed: bool
    ld: int
    batch_stride: int


def matrix_layout(shape, strides, itemsize):
    """(transposed, ld) for a 2-d (R, C) array with these byte strides, or None if cuBLAS cannot read it."""
    R, C = shape
    if any(s % itemsize or s < 0 for s in strides):
        return None
    s_r, s_c = (s // itemsize for s in strides)
    ld = s_r if R > 1 else max(C, 1)                          # row-major: element (i, j) at i*ld + j
    if (C == 1 or s_c == 1) and ld >= max(C, 1):
        return False, ld
    ld = s_c if C > 1 else max(R, 1)                          # column-major: element (i, j) at i + j*ld
    if (R == 1 or s_r == 1) and ld >= max(R, 1):
        return True, ld
    return None


def batch_stride(shape, strides, itemsize):
    """The one stride (elements) that walks the leading axes in C order, or None if there is none."""
    dims = [(n, s) for n, s in zip(shape, strides) if n > 1]
    if not dims:
        return 0
    for (_, outer), (n, inner) in zip(dims, dims[1:]):
        if outer != inner * n:
            return None
    step = dims[-1][1]
    return step // itemsize if step % itemsize == 0 and step >= 0 else None


def layout(a, batch):
    """The Layout of a (..., R, C) read as a batch of `batch` entries (2-d a: shared, stride 0), or None."""
    matrix = matrix_layout(a.shape[-2:], a.strides[-2:], a.itemsize)
    if matrix is None:
        return None
    stride = 0 if a.ndim == 2 else batch_stride(a.shape[:-2], a.strides[:-2], a.itemsize)
    if stride is None or (a.ndim > 2 and int(np.prod(a.shape[:-2])) not in (1, batch)):
        return None
    return Layout(matrix[0], matrix[1], stride)


@dataclass(frozen=True)
class Plan:
    """One product's cuBLAS call, all but the pointers: decided once per layout, then replayed.

    prepare_a, prepare_b: "" (read in place), "copy" (a layout cuBLAS cannot read: made
    contiguous) or "broadcast" (batch axes that broadcast: materialised); `call`: the gemm
    arguments in order, with None where the arrays go (b, a, c: the column-major swap).
    """

    prepare_a: str
    prepare_b: str
    batch_shape: tuple
    out_shape: tuple
    out_dtype: np.dtype
    call: tuple | None                                         # None: nothing to multiply (K = 0 or an empty c)


def plan(a, b, out_dtype, has_bias: bool, out=None, accumulate: bool = False) -> Plan:
    """The Plan of c = a @ b (+ bias) (+ out when accumulating), for these shapes, strides and dtypes."""
    if a.dtype != b.dtype or a.dtype not in CUDA_TYPES or a.ndim < 2 or b.ndim < 2:
        raise TypeError(f"cupy_blas.matmul: float matrices of one dtype, got {a.dtype} {a.shape}, {b.dtype} {b.shape}")
    (M, K), (K2, N) = a.shape[-2:], b.shape[-2:]
    if K != K2:
        raise ValueError(f"cupy_blas.matmul: shapes {a.shape} and {b.shape} are not aligned")
    batch_shape = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    batch = int(np.prod(batch_shape))
    out_shape = batch_shape + (M, N)
    if out is None:
        if accumulate:
            raise ValueError("cupy_blas.matmul: accumulate needs out")
        out_layout = Layout(False, N, M * N)
    else:
        out_dtype = out_dtype or out.dtype
        out_layout = layout(out, batch) if out.shape == out_shape else None
        if out_layout is None or out_layout.transposed or np.dtype(out_dtype) != out.dtype:
            raise ValueError(f"cupy_blas.matmul: out {out.dtype} {out.shape} strides {out.strides} is not a "
                             f"row-major {np.dtype(out_dtype)} {out_shape} cuBLAS can write")
    out_dtype = np.dtype(out_dtype or a.dtype)
    prepared, layouts = [], []
    for x in (a, b):
        how = "broadcast" if x.ndim > 2 and x.shape[:-2] != batch_shape else ""
        found = None if how else layout(x, batch)
        if found is None:                                      # read a contiguous copy instead
            how = how or "copy"
            shape = (batch_shape if x.ndim > 2 else ()) + x.shape[-2:]
            found = layout(np.lib.stride_tricks.as_strided(np.empty(0, x.dtype), shape,
                                                           _c_strides(shape, x.itemsize)), batch)
        prepared.append(how)
        layouts.append(found)
    (la, lb), empty = layouts, int(np.prod(out_shape)) == 0 or K == 0
    beta = 1.0 if has_bias or accumulate else 0.0
    # column-major Cᵀ (N, M) = Bᵀ (N, K) · Aᵀ (K, M): b first, then a
    call = None if empty else (OP_T if lb.transposed else OP_N, OP_T if la.transposed else OP_N, N, M, K,
                               None, lb.ld, lb.batch_stride, None, la.ld, la.batch_stride, beta,
                               None, out_layout.ld, out_layout.batch_stride, batch)
    return Plan(*prepared, batch_shape, out_shape, out_dtype, call)


def _c_strides(shape, itemsize):
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def matmul(a, b, out_dtype=None, bias=None, *, xp, gemm, out=None, accumulate=False, plans=None):
    """c = a @ b (+ bias (N,) added before the one rounding), in out_dtype (default a's dtype).

    a, b: float16, bf16 (uint16 bits), float32 or float64, one dtype; out_dtype: theirs or float32.
    Operands whose layout cuBLAS cannot read (and batch axes that broadcast) are copied first.
    `out`: write c there (any row-major layout with one batch stride: a head's slot of a wider
    array, say); `accumulate`: out += a @ b. `plans`: a dict that keeps each layout's Plan, so a
    product of a shape seen before is planned by one dictionary lookup.
    """
    key = (a.shape, a.strides, a.dtype, b.shape, b.strides, b.dtype, out_dtype, bias is not None, accumulate,
           None if out is None else (out.shape, out.strides, out.dtype))
    found = None if plans is None else plans.get(key)
    if found is None:
        found = plan(a, b, out_dtype, bias is not None, out, accumulate)
        if plans is not None:
            plans[key] = found
    if found.prepare_a:
        a = _prepare(a, found.prepare_a, found.batch_shape, xp)
    if found.prepare_b:
        b = _prepare(b, found.prepare_b, found.batch_shape, xp)
    c = xp.empty(found.out_shape, dtype=found.out_dtype) if out is None else out
    if bias is not None:
        c[...] = bias                                          # C starts as the bias; GEMM adds A B (beta = 1)
    call = found.call
    if call is None:
        if bias is None and not accumulate and c.size:
            c[...] = 0
        return c
    gemm(*call[:5], b, *call[6:8], a, *call[9:12], c, *call[13:])
    return c


def _prepare(x, how, batch_shape, xp):
    if how == "broadcast":
        return xp.ascontiguousarray(xp.broadcast_to(x, batch_shape + x.shape[-2:]))
    return xp.ascontiguousarray(x)                             # "copy"


def cublas_gemm(op_a, op_b, m, n, k, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc, stride_c, batch, *,
                handle=None):
    """One cuBLAS call on CuPy arrays (the matrices start at each array's first element); alpha = 1.

    `handle`: a cuBLAS handle already bound to the stream (graph capture: CuPy's own handle is
    re-bound to the current stream on every get_cublas_handle(), which a capture refuses).
    """
    from cupy.cuda import device
    from cupy_backends.cuda.libs import cublas

    wide = A.dtype == np.float64
    scalar, compute = (np.float64, COMPUTE_64F) if wide else (np.float32, COMPUTE_32F)
    one, beta_ = np.array(1.0, scalar), np.array(beta, scalar)   # host scalars of the compute type
    handle = device.get_cublas_handle() if handle is None else handle
    a_type, c_type = CUDA_TYPES[A.dtype], CUDA_TYPES[C.dtype]
    if batch == 1:
        cublas.gemmEx(handle, op_a, op_b, m, n, k, one.ctypes.data, A.data.ptr, a_type, lda,
                      B.data.ptr, a_type, ldb, beta_.ctypes.data, C.data.ptr, c_type, ldc, compute, GEMM_DEFAULT)
    else:
        cublas.gemmStridedBatchedEx(handle, op_a, op_b, m, n, k, one.ctypes.data, A.data.ptr, a_type, lda,
                                    stride_a, B.data.ptr, a_type, ldb, stride_b, beta_.ctypes.data,
                                    C.data.ptr, c_type, ldc, stride_c, batch, compute, GEMM_DEFAULT)


def gemm_cost(op_a, op_b, m, n, k, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc, stride_c, batch):
    """(bytes, FLOPs) of one cuBLAS call: A and B read (once if shared by the batch), C written (and read if beta)."""
    reads = (m * k * (batch if stride_a else 1) + k * n * (batch if stride_b else 1)) * A.itemsize
    return reads + m * n * batch * C.itemsize * (2 if beta else 1), 2 * m * n * k * batch


def _column_major(X, rows, cols, ld, stride, batch, writeable=False):
    """The (batch, rows, cols) column-major matrices cuBLAS sees at X's first element, bounds-checked."""
    item = X.itemsize
    root = root_array(X)
    offset = X.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    available = (root.nbytes - offset) // item
    last = (batch - 1) * stride + (cols - 1) * ld + (rows - 1)
    if offset < 0 or last >= available or ld < max(rows, 1):
        raise ValueError(f"cuBLAS would read outside the array: {batch}x({rows}, {cols}) ld {ld} "
                         f"stride {stride} needs element {last}, the buffer has {available}")
    return np.lib.stride_tricks.as_strided(X.view(np.ndarray), (batch, rows, cols), (stride * item, item, ld * item),
                                           writeable=writeable)


def _values(X):
    return bf16_to_float32(X).astype(np.float64) if X.dtype == BF16 else X.astype(np.float64)


def numpy_gemm(op_a, op_b, m, n, k, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc, stride_c, batch):
    """What cublas_gemm computes, on NumPy arrays: C = op(A) op(B) + beta C, column-major, in float64."""
    a_rows, a_cols = (m, k) if op_a == OP_N else (k, m)
    b_rows, b_cols = (k, n) if op_b == OP_N else (n, k)
    a = _values(_column_major(A, a_rows, a_cols, lda, stride_a, batch))
    b = _values(_column_major(B, b_rows, b_cols, ldb, stride_b, batch))
    a = a if op_a == OP_N else a.transpose(0, 2, 1)           # (batch, m, k)
    b = b if op_b == OP_N else b.transpose(0, 2, 1)           # (batch, k, n)
    out = _column_major(C, m, n, ldc, stride_c, batch, writeable=True)
    result = a @ b + (beta * _values(out) if beta else 0.0)
    out[...] = float_to_bf16(result) if C.dtype == BF16 else result.astype(C.dtype)
