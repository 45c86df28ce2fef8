"""Softmax backward on the GPU: grid/block arithmetic and launch of cuda.cu.

v1: one thread per row, two passes (block = threads per block)
v2: one warp per row, shuffle-reduced dot then a write pass (block/32 rows per block)
v3: one warp per row held in registers, 32*VPT >= L; rows longer than 1024 fall back to v2

Shapes: L = keys per row; rows = prod(y.shape[:-1]).
"""
from __future__ import annotations

import numpy as np

from ..cupy_launcher import CTYPES, VPTS, CudaKernels, acc_dtype, ceil_div, fit_block, vpt_for

CUDA = CudaKernels("softmax_backward", [
    *(f"softmax_backward_v{v}<{t}>" for v in (1, 2) for t in CTYPES.values()),
    *(f"softmax_backward_v3<{t}, {k}>" for t in CTYPES.values() for k in VPTS),  # VPTS: values per lane
])


def _prepare(y, dy, scale):
    import cupy as cp

    y, dy = cp.ascontiguousarray(y), cp.ascontiguousarray(dy, dtype=y.dtype)
    if y.dtype not in CTYPES or y.shape != dy.shape:
        raise TypeError(f"softmax_backward: bad inputs {y.dtype} {y.shape} / {dy.shape}")
    acc = acc_dtype(y.dtype)
    L = y.shape[-1]
    return y, dy, cp.empty_like(y), acc(scale), np.int64(y.size // max(L, 1)), np.int32(L)


def launch_v1(y, dy, scale, block=128):
    y, dy, dx, scale, rows, L = _prepare(y, dy, scale)
    if rows == 0 or L == 0:
        return dx
    kernel = CUDA.function(f"softmax_backward_v1<{CTYPES[y.dtype]}>")
    block = fit_block(kernel, block)
    kernel((ceil_div(int(rows), block),), (block,), (dx, y, dy, scale, rows, L))  # one thread per row
    return dx


def launch_v2(y, dy, scale, block=128):
    y, dy, dx, scale, rows, L = _prepare(y, dy, scale)
    if rows == 0 or L == 0:
        return dx
    kernel = CUDA.function(f"softmax_backward_v2<{CTYPES[y.dtype]}>")
    block = fit_block(kernel, block)
    kernel((ceil_div(int(rows), block // 32),), (block,), (dx, y, dy, scale, rows, L))  # one warp per row
    return dx


def launch_v3(y, dy, scale, block=128):
    if y.shape[-1] > 32 * VPTS[-1]:
        return launch_v2(y, dy, scale, block)  # row does not fit in one warp's registers
    y, dy, dx, scale, rows, L = _prepare(y, dy, scale)
    if rows == 0 or L == 0:
        return dx
    kernel = CUDA.function(f"softmax_backward_v3<{CTYPES[y.dtype]}, {vpt_for(int(L))}>")
    block = fit_block(kernel, block)
    kernel((ceil_div(int(rows), block // 32),), (block,), (dx, y, dy, scale, rows, L))  # one warp per row
    return dx


VERSIONS = {1: launch_v1, 2: launch_v2, 3: launch_v3}
DEFAULT = 3
BLOCKS = {1: (32, 128, 256), 2: (32, 128, 256, 1024), 3: (32, 128, 256, 1024)}  # tested configs


def softmax_backward(y, dy, scale):
    """dx = scale * y * (dy - sum(dy * y, -1, keepdims))."""
    return VERSIONS[DEFAULT](y, dy, scale)
