"""Embedding backward on the GPU: grid/block arithmetic and launch of cuda.cu (§3.4).

v1: atomicAdd, one thread per (token, column) (block = threads per block)
v2: sort ids, then one block row per run of equal ids (block = threads over columns); bitwise
    reproducible but ~4.5x slower than v1 on an H100 (25000 x 512 into 37000 rows): DEFAULT 1

Shapes: N = tokens (B*T), D = d_model, num_embeddings = table rows (V).
dweight comes back in dout's dtype (bf16: uint16 bits, the float32 sums rounded by bf16_cast,
never astype, which would turn the numbers into integers). An id outside the table writes no
row and makes row 0 NaN.
"""
from __future__ import annotations

import numpy as np

from ...dtypes import BF16
from ..bf16_cast.cupy_launch import bf16_cast
from ..cupy_launcher import CTYPES, CudaKernels, acc_dtype, ceil_div

BF16_NAN = 0x7FC0  # a quiet NaN's bf16 bits

CUDA = CudaKernels("embedding_backward",
                   [f"embedding_backward_v{v}<{t}>" for v in (1, 2) for t in CTYPES.values()])


def _prepare(dout, ids):
    import cupy as cp

    dout = cp.ascontiguousarray(dout)
    if dout.dtype not in CTYPES or dout.ndim != 2:
        raise TypeError(f"embedding_backward: need (N, D) float dout, got {dout.dtype} {dout.shape}")
    return dout, cp.ascontiguousarray(ids, dtype=cp.int64).reshape(-1)  # (N, D), (N,)


def launch_v1(dout, ids, num_embeddings, block=256):
    import cupy as cp

    dout, ids = _prepare(dout, ids)
    N, D = dout.shape
    acc = acc_dtype(dout.dtype)  # atomics in float32/float64
    dweight = cp.zeros((num_embeddings, D), dtype=acc)  # (V, D)
    if N * D:
        kernel = CUDA.function(f"embedding_backward_v1<{CTYPES[dout.dtype]}>")
        kernel((ceil_div(N * D, block),), (block,),
               (dweight, dout, ids, np.int64(N), np.int32(D), np.int64(num_embeddings)))
    return bf16_cast(dweight, BF16) if dout.dtype == BF16 else dweight.astype(dout.dtype, copy=False)


def launch_v2(dout, ids, num_embeddings, block=128):
    import cupy as cp

    dout, ids = _prepare(dout, ids)
    N, D = dout.shape
    dweight = cp.zeros((num_embeddings, D), dtype=dout.dtype)  # (V, D), untouched rows stay 0
    if N * D == 0:
        return dweight
    order = cp.argsort(ids).astype(cp.int64, copy=False)  # (N,) tokens grouped by id
    sorted_ids = ids[order]  # (N,)
    is_start = cp.concatenate([cp.ones(1, cp.bool_), sorted_ids[1:] != sorted_ids[:-1]])  # (N,)
    run_start = cp.flatnonzero(is_start).astype(cp.int64)  # (runs,)
    runs = run_start.size
    grid = (runs, ceil_div(D, block))  # (one run of equal ids, a slice of columns)
    kernel = CUDA.function(f"embedding_backward_v2<{CTYPES[dout.dtype]}>")
    kernel(grid, (block,), (dweight, dout, order, sorted_ids, run_start, np.int64(runs), np.int64(N), np.int32(D),
                            np.int64(num_embeddings)))
    bad = (sorted_ids[0] < 0) | (sorted_ids[-1] >= num_embeddings)  # on the device: no sync
    nan = dweight.dtype.type(BF16_NAN if dweight.dtype == BF16 else np.nan)
    dweight[0] = cp.where(bad, nan, dweight[0])  # row 0 NaN, as v1 makes it
    return dweight


VERSIONS = {1: launch_v1, 2: launch_v2}
DEFAULT = 1
BLOCKS = {1: (64, 256, 1024), 2: (32, 128, 512)}  # tested configs


def embedding_backward(dout, ids, num_embeddings):
    """dweight = zeros((num_embeddings, D)); dweight[ids[i]] += dout[i]."""
    return VERSIONS[DEFAULT](dout, ids, num_embeddings)
