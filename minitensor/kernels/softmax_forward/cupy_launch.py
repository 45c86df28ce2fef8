"""Softmax forward on the GPU: grid/block arithmetic and launch of cuda.cu (§3.2.1, §3.2.3).

v1: one thread per row, three passes over the row (block = threads per block)
v2: one warp per row, online max+sum then a write pass (block = threads, block/32 rows)
v3: one warp per row held in registers, 32*VPT >= L; rows longer than 1024 fall back to v2
v4: two rows per warp held in registers for L <= 128; longer rows fall back to v3 (H100,
    (250, 8, 100, 100): 0.154 ms vs v3's 0.139 ms, so v3 stays the default)

Shapes: L = keys per row; x is viewed as (d0, d1, d2, L) so the mask can be passed as a
zero-stride broadcast view (strides per axis, in bytes of bool), never copied to x's shape.
"""
from __future__ import annotations

import numpy as np

from ..cupy_launcher import CTYPES, VPTS, CudaKernels, acc_dtype, ceil_div, fit_block, vpt_for

V4_VPTS, V4_ROWS = (1, 2, 4), 2  # v4 instantiations: short rows, two per warp
CUDA = CudaKernels("softmax_forward", [
    *(f"softmax_forward_v{v}<{t}>" for v in (1, 2) for t in CTYPES.values()),
    *(f"softmax_forward_v3<{t}, {k}>" for t in CTYPES.values() for k in VPTS),  # VPTS: values per lane
    *(f"softmax_forward_v4<{t}, {k}, {V4_ROWS}>" for t in CTYPES.values() for k in V4_VPTS),
])


def _as_4d(shape):
    """x's shape as (d0, d1, d2, L): pad with leading 1s, or fold >3 leading axes into d0."""
    if len(shape) > 4:
        return (int(np.prod(shape[:-1])), 1, 1, shape[-1])
    return (1,) * (4 - len(shape)) + tuple(shape)


def _mask_args(mask, shape):
    """(mask, has_mask, ms0, ms1, ms2, ms3, d1, d2) kernel arguments for x of this shape."""
    import cupy as cp

    d0, d1, d2, L = _as_4d(shape)
    if mask is None:  # the pointer is never read (has_mask = 0): no array to make (and no memset)
        return (np.uint64(0), np.int32(0), *[np.int64(0)] * 4, np.int32(d1), np.int32(d2))
    m = cp.broadcast_to(cp.asarray(mask, dtype=cp.bool_), shape)  # zero strides: no copy
    if len(shape) > 4:
        m = cp.ascontiguousarray(m)  # more than 3 leading axes is rare: copy, keep the kernel 4-D
        strides = (L * d1 * d2, 0, 0, 1)
    else:
        strides = (0,) * (4 - len(shape)) + tuple(m.strides)  # bytes == elements for bool
    return (m, np.int32(1), *[np.int64(s) for s in strides], np.int32(d1), np.int32(d2))


def _prepare(x, scale):
    import cupy as cp

    x = cp.ascontiguousarray(x)
    if x.dtype not in CTYPES:
        raise TypeError(f"softmax_forward: unsupported dtype {x.dtype}")
    acc = acc_dtype(x.dtype)  # statistics dtype
    return x, cp.empty_like(x), acc(scale), x.size // max(x.shape[-1], 1), x.shape[-1]


def launch_v1(x, scale, mask, block=128):
    x, y, scale, rows, L = _prepare(x, scale)
    if rows == 0 or L == 0:
        return y
    kernel = CUDA.function(f"softmax_forward_v1<{CTYPES[x.dtype]}>")
    block = fit_block(kernel, block)
    grid = ceil_div(rows, block)  # one thread per row
    kernel((grid,), (block,), (y, x, *_mask_args(mask, x.shape), scale, np.int64(rows), np.int32(L)))
    return y


def launch_v2(x, scale, mask, block=128):
    x, y, scale, rows, L = _prepare(x, scale)
    if rows == 0 or L == 0:
        return y
    kernel = CUDA.function(f"softmax_forward_v2<{CTYPES[x.dtype]}>")
    block = fit_block(kernel, block)
    grid = ceil_div(rows, block // 32)  # one warp per row
    kernel((grid,), (block,), (y, x, *_mask_args(mask, x.shape), scale, np.int64(rows), np.int32(L)))
    return y


def launch_v3(x, scale, mask, block=128):
    L = x.shape[-1]
    if L > 32 * VPTS[-1]:
        return launch_v2(x, scale, mask, block)  # row does not fit in one warp's registers
    x, y, scale, rows, L = _prepare(x, scale)
    if rows == 0 or L == 0:
        return y
    kernel = CUDA.function(f"softmax_forward_v3<{CTYPES[x.dtype]}, {vpt_for(L)}>")
    block = fit_block(kernel, block)
    grid = ceil_div(rows, block // 32)  # one warp per row
    kernel((grid,), (block,), (y, x, *_mask_args(mask, x.shape), scale, np.int64(rows), np.int32(L)))
    return y


def launch_v4(x, scale, mask, block=128):
    L = x.shape[-1]
    if L > 32 * V4_VPTS[-1]:
        return launch_v3(x, scale, mask, block)  # long rows: one per warp is enough work
    x, y, scale, rows, L = _prepare(x, scale)
    if rows == 0 or L == 0:
        return y
    kernel = CUDA.function(f"softmax_forward_v4<{CTYPES[x.dtype]}, {vpt_for(L, V4_VPTS)}, {V4_ROWS}>")
    block = fit_block(kernel, block)
    grid = ceil_div(rows, block // 32 * V4_ROWS)  # V4_ROWS rows per warp
    kernel((grid,), (block,), (y, x, *_mask_args(mask, x.shape), scale, np.int64(rows), np.int32(L)))
    return y


VERSIONS = {1: launch_v1, 2: launch_v2, 3: launch_v3, 4: launch_v4}
DEFAULT = 3
BLOCKS = {1: (32, 128, 256), 2: (32, 128, 256, 1024), 3: (32, 128, 256, 1024),
          4: (32, 128, 256, 1024)}  # tested configs; launches clamp to the kernel's register limit


def softmax_forward(x, scale, mask):
    """y = softmax(scale * x) over the last axis, blocked (mask True) entries -> 0."""
    return VERSIONS[DEFAULT](x, scale, mask)
