"""float <-> bfloat16 conversion on the GPU: grid/block arithmetic and launch of cuda.cu.

v1: one thread per element (block = threads per block)
v2: eight elements per thread, 16-byte loads and stores, when both arrays are 16-byte aligned
    (else v1)

Shapes: any; x is made contiguous. bf16 arrays are uint16 (minitensor/dtypes.py).
"""
from __future__ import annotations

import numpy as np

from ...dtypes import BF16
from ..cupy_launcher import CTYPES, CudaKernels, ceil_div, fit_block

FLOATS = ("float", "f16", "double")
PAIRS = tuple((f, "bf16") for f in FLOATS) + tuple(("bf16", f) for f in FLOATS)  # (in, out)
CUDA = CudaKernels("bf16_cast", [f"bf16_cast_v{v}<{a}, {b}>" for v in (1, 2) for a, b in PAIRS])


def _prepare(x, dtype):
    import cupy as cp

    x, dtype = cp.ascontiguousarray(x), np.dtype(dtype)
    pair = (CTYPES.get(x.dtype), CTYPES.get(dtype))
    if pair not in PAIRS:
        raise TypeError(f"bf16_cast: {x.dtype} -> {dtype} is not a conversion to or from bf16 (uint16)")
    return x, cp.empty(x.shape, dtype), pair


def launch_v1(x, dtype, block=256):
    x, y, (a, b) = _prepare(x, dtype)
    if x.size:
        kernel = CUDA.function(f"bf16_cast_v1<{a}, {b}>")
        block = fit_block(kernel, block)
        kernel((ceil_div(x.size, block),), (block,), (y, x, np.int64(x.size)))  # one thread per element
    return y


def launch_v2(x, dtype, block=256):
    x, y, (a, b) = _prepare(x, dtype)
    if x.data.ptr % 16 or y.data.ptr % 16:
        return launch_v1(x, dtype, block)  # a view off a 16-byte boundary
    if x.size:
        kernel = CUDA.function(f"bf16_cast_v2<{a}, {b}>")
        block = fit_block(kernel, block)
        kernel((ceil_div(x.size, 8 * block),), (block,), (y, x, np.int64(x.size)))  # 8 elements a thread
    return y


VERSIONS = {1: launch_v1, 2: launch_v2}
DEFAULT = 2
BLOCKS = {1: (64, 256, 1024), 2: (64, 256, 1024)}  # tested configs


def bf16_cast(x, dtype):
    """x float -> bf16 bits (dtype uint16), or bf16 bits -> float dtype."""
    if np.dtype(dtype) != BF16 and x.dtype != BF16:
        raise TypeError(f"bf16_cast: {x.dtype} -> {np.dtype(dtype)} is not a conversion to or from bf16 (uint16)")
    return VERSIONS[DEFAULT](x, dtype)
