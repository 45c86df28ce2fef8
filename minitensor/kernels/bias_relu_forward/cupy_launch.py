"""Bias + ReLU on the GPU: grid/block arithmetic and launch of cuda.cu (§3.3, Eq. (2)).

v1: one thread per element, grid-stride (block = threads per block)
v2: columns across the threads of a block, rows across a 2-d grid (block = threads per block)

Shapes: x (..., C) C-contiguous, written in place; bias (C,) in x's dtype or float32.
"""
from __future__ import annotations

import numpy as np

from ..cupy_launcher import CTYPES, CudaKernels, ceil_div, fit_block

PAIRS = [("float", "float"), ("f16", "f16"), ("f16", "float"), ("bf16", "bf16"), ("bf16", "float"),
         ("double", "double")]  # (x's type, the bias's type)
CUDA = CudaKernels("bias_relu_forward", [f"bias_relu_forward_v{v}<{t}, {b}>" for v in (1, 2) for t, b in PAIRS])
MAX_GRID_Y = 65535


def _prepare(x, bias):
    import cupy as cp

    if not x.flags.c_contiguous or x.dtype not in CTYPES:
        raise ValueError(f"bias_relu_forward: x must be a C-contiguous float array, got {x.dtype} {x.strides}")
    t = CTYPES[x.dtype]
    b = CTYPES.get(bias.dtype)
    if (t, b) not in PAIRS:  # another dtype: the bias in x's (C values)
        bias, b = bias.astype(x.dtype), t
    return cp.ascontiguousarray(bias), f"<{t}, {b}>", x.shape[-1], x.size


def launch_v1(x, bias, block=256):
    bias, types, C, n = _prepare(x, bias)
    if n:
        kernel = CUDA.function(f"bias_relu_forward_v1{types}")
        block = fit_block(kernel, block)
        kernel((min(ceil_div(n, block), 65536),), (block,), (x, bias, np.int64(n), np.int32(C)))
    return x


def launch_v2(x, bias, block=256):
    bias, types, C, n = _prepare(x, bias)
    if n:
        kernel = CUDA.function(f"bias_relu_forward_v2{types}")
        block = fit_block(kernel, min(block, 32 * ceil_div(C, 32)))
        rows = n // C
        kernel((ceil_div(C, block), min(rows, MAX_GRID_Y)), (block,), (x, bias, np.int64(rows), np.int32(C)))
    return x


VERSIONS = {1: launch_v1, 2: launch_v2}
DEFAULT = 2
BLOCKS = {1: (64, 256, 1024), 2: (32, 256, 1024)}  # tested configs


def bias_relu_forward(x, bias):
    """In place: x = max(0, x + bias) over the last axis. Returns x."""
    return VERSIONS[DEFAULT](x, bias)
