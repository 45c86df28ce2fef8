"""The bias's backward on the GPU: grid/block arithmetic and launch of cuda.cu.

v1: one thread per column (block = threads per block)
v2: a block of 32 columns × 8 rows in flight per 32 columns (the block size is fixed)

Shapes: dy (..., R, C); relu_out like dy or None; db (..., C) summed in float32 (float64 for
float64 dy), then written in `dtype`.
"""
from __future__ import annotations

import numpy as np

from ..cupy_launcher import CTYPES, CudaKernels, acc_dtype, ceil_div, fit_block

CUDA = CudaKernels("bias_backward", [f"bias_backward_v{v}<{t}, {m}>" for v in (1, 2) for t in CTYPES.values()
                                     for m in ("true", "false")])
ROWS = 8  # cuda.cu BIAS_BACKWARD_ROWS


def _prepare(dy, relu_out):
    import cupy as cp

    dy = cp.ascontiguousarray(dy)
    if dy.dtype not in CTYPES or dy.ndim < 2:
        raise TypeError(f"bias_backward: a float array of rows, got {dy.dtype} {dy.shape}")
    R, C = dy.shape[-2:]
    mask = None if relu_out is None else cp.ascontiguousarray(relu_out, dtype=dy.dtype)
    dx = dy if mask is None else cp.empty_like(dy)
    new = cp.zeros if R == 0 else cp.empty  # no rows: the sums are 0
    db = new(dy.shape[:-2] + (C,), dtype=acc_dtype(dy.dtype))
    types = f"<{CTYPES[dy.dtype]}, {'false' if mask is None else 'true'}>"
    return dy, mask if mask is not None else dy, dx, db, types, R, C, db.size // max(C, 1)


def launch_v1(dy, relu_out, dtype, block=128):
    dy, mask, dx, db, types, R, C, G = _prepare(dy, relu_out)
    if R and C and G:
        kernel = CUDA.function(f"bias_backward_v1{types}")
        block = fit_block(kernel, block)
        kernel((ceil_div(G * C, block),), (block,), (dx, db, dy, mask, np.int64(R), np.int32(C), np.int32(G)))
    return dx, db.astype(dtype, copy=False)


def launch_v2(dy, relu_out, dtype):
    dy, mask, dx, db, types, R, C, G = _prepare(dy, relu_out)
    if R and C and G:
        CUDA.function(f"bias_backward_v2{types}")((ceil_div(C, 32), G), (32, ROWS),
                                                  (dx, db, dy, mask, np.int64(R), np.int32(C)))
    return dx, db.astype(dtype, copy=False)


VERSIONS = {1: launch_v1, 2: launch_v2}
DEFAULT = 2
BLOCKS = {1: (32, 128, 256), 2: (256,)}  # tested configs (v2: 32 × 8, fixed)


def bias_backward(dy, relu_out, dtype):
    """(dx, db): dx = dy where relu_out > 0 (dy itself without relu_out), db = Σ over axis -2 of dx, in dtype."""
    return VERSIONS[DEFAULT](dy, relu_out, dtype)
