"""Softmax backward on the GPU: grid/block arithmetic and launch of cuda.cu.

v1: one thread per row, two passes (block = threads per block)
v2: one warp per row, shuffle-reduced dot then a write pass (block/32 rows per block)
v3: one warp per row held in registers, 32*VPT >= L; rows longer than 1024 fall back to v2

Shapes: L = keys per row; rows = prod(y.shape[:-1]).
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

CTYPES = {np.dtype(np.float32): "float", np.dtype(np.float16): "f16", np.dtype(np.float64): "double"}
VPTS = (1, 2, 4, 8, 16, 32)  # v3 instantiations: values per lane


@functools.cache
def _module():
    """Compile cuda.cu once per process (NVRTC through CuPy), every instantiation by name."""
    import cupy as cp

    names = [f"softmax_backward_v{v}<{t}>" for v in (1, 2) for t in CTYPES.values()]
    names += [f"softmax_backward_v3<{t}, {k}>" for t in CTYPES.values() for k in VPTS]
    code = Path(__file__).with_name("cuda.cu").read_text()
    return cp.RawModule(code=code, options=("-std=c++17",), name_expressions=names)


def _fit(kernel, block):
    """The block size, lowered to what the kernel's register use allows (a multiple of 32)."""
    return min(block, kernel.max_threads_per_block)


def _prepare(y, dy, scale):
    import cupy as cp

    y, dy = cp.ascontiguousarray(y), cp.ascontiguousarray(dy, dtype=y.dtype)
    if y.dtype not in CTYPES or y.shape != dy.shape:
        raise TypeError(f"softmax_backward: bad inputs {y.dtype} {y.shape} / {dy.shape}")
    acc = np.float64 if y.dtype == np.float64 else np.float32
    L = y.shape[-1]
    return y, dy, cp.empty_like(y), acc(scale), np.int64(y.size // max(L, 1)), np.int32(L)


def launch_v1(y, dy, scale, block=128):
    y, dy, dx, scale, rows, L = _prepare(y, dy, scale)
    if rows == 0 or L == 0:
        return dx
    kernel = _module().get_function(f"softmax_backward_v1<{CTYPES[y.dtype]}>")
    block = _fit(kernel, block)
    kernel(((int(rows) + block - 1) // block,), (block,), (dx, y, dy, scale, rows, L))
    return dx


def launch_v2(y, dy, scale, block=128):
    y, dy, dx, scale, rows, L = _prepare(y, dy, scale)
    if rows == 0 or L == 0:
        return dx
    kernel = _module().get_function(f"softmax_backward_v2<{CTYPES[y.dtype]}>")
    block = _fit(kernel, block)
    rows_per_block = block // 32  # one warp per row
    kernel(((int(rows) + rows_per_block - 1) // rows_per_block,), (block,), (dx, y, dy, scale, rows, L))
    return dx


def launch_v3(y, dy, scale, block=128):
    if y.shape[-1] > 32 * VPTS[-1]:
        return launch_v2(y, dy, scale, block)  # row does not fit in one warp's registers
    y, dy, dx, scale, rows, L = _prepare(y, dy, scale)
    if rows == 0 or L == 0:
        return dx
    vpt = next(k for k in VPTS if 32 * k >= int(L))
    kernel = _module().get_function(f"softmax_backward_v3<{CTYPES[y.dtype]}, {vpt}>")
    block = _fit(kernel, block)
    rows_per_block = block // 32
    kernel(((int(rows) + rows_per_block - 1) // rows_per_block,), (block,), (dx, y, dy, scale, rows, L))
    return dx


VERSIONS = {1: launch_v1, 2: launch_v2, 3: launch_v3}
DEFAULT = 3
BLOCKS = {1: (32, 128, 256), 2: (32, 128, 256, 1024), 3: (32, 128, 256, 1024)}  # tested configs


def softmax_backward(y, dy, scale):
    """dx = scale * y * (dy - sum(dy * y, -1, keepdims))."""
    return VERSIONS[DEFAULT](y, dy, scale)
