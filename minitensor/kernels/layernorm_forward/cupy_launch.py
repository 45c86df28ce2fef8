"""LayerNorm forward on the GPU: grid/block arithmetic and launch of cuda.cu (§3.1).

v1: one thread per row, two passes + write (block = threads per block)
v2: one warp per row, three passes over global memory (block/32 rows per block)
v3: one warp per row held in registers, 32*VPT >= D; D > 1024 falls back to v2

Shapes: D = d_model, rows = prod(x.shape[:-1]). mean, rstd come back with shape x.shape[:-1]
in float32 (float64 for float64 x); gamma and beta are cast to that dtype (D values, cheap).
"""
from __future__ import annotations

import numpy as np

from ..cupy_launcher import CTYPES, VPTS, CudaKernels, acc_dtype, ceil_div, fit_block, vpt_for

CUDA = CudaKernels("layernorm_forward", [
    *(f"layernorm_forward_v{v}<{t}>" for v in (1, 2) for t in CTYPES.values()),
    *(f"layernorm_forward_v3<{t}, {k}>" for t in CTYPES.values() for k in VPTS),  # VPTS: values per lane
])


def _prepare(x, gamma, beta, eps):
    import cupy as cp

    x = cp.ascontiguousarray(x)
    if x.dtype not in CTYPES:
        raise TypeError(f"layernorm_forward: unsupported dtype {x.dtype}")
    acc = acc_dtype(x.dtype)  # statistics dtype
    D = x.shape[-1]
    rows = x.size // max(D, 1)
    gamma = cp.ascontiguousarray(gamma, dtype=acc)  # (D,)
    beta = cp.ascontiguousarray(beta, dtype=acc)  # (D,)
    y = cp.empty_like(x)
    mean = cp.empty(x.shape[:-1], dtype=acc)  # (...,)
    rstd = cp.empty(x.shape[:-1], dtype=acc)  # (...,)
    args = (y, mean, rstd, x, gamma, beta, acc(eps), np.int64(rows), np.int32(D))
    return args, rows, D


def launch_v1(x, gamma, beta, eps, block=128):
    args, rows, D = _prepare(x, gamma, beta, eps)
    if rows and D:
        kernel = CUDA.function(f"layernorm_forward_v1<{CTYPES[x.dtype]}>")
        block = fit_block(kernel, block)
        kernel((ceil_div(rows, block),), (block,), args)  # one thread per row
    return args[:3]


def launch_v2(x, gamma, beta, eps, block=128):
    args, rows, D = _prepare(x, gamma, beta, eps)
    if rows and D:
        kernel = CUDA.function(f"layernorm_forward_v2<{CTYPES[x.dtype]}>")
        block = fit_block(kernel, block)
        kernel((ceil_div(rows, block // 32),), (block,), args)  # one warp per row
    return args[:3]


def launch_v3(x, gamma, beta, eps, block=128):
    if x.shape[-1] > 32 * VPTS[-1]:
        return launch_v2(x, gamma, beta, eps, block)  # row does not fit in a warp's registers
    args, rows, D = _prepare(x, gamma, beta, eps)
    if rows and D:
        kernel = CUDA.function(f"layernorm_forward_v3<{CTYPES[x.dtype]}, {vpt_for(D)}>")
        block = fit_block(kernel, block)
        kernel((ceil_div(rows, block // 32),), (block,), args)  # one warp per row
    return args[:3]


VERSIONS = {1: launch_v1, 2: launch_v2, 3: launch_v3}
DEFAULT = 3
BLOCKS = {1: (32, 128, 256), 2: (32, 128, 256, 1024), 3: (32, 128, 256, 1024)}  # tested configs


def layernorm_forward(x, gamma, beta, eps):
    """(y, mean, rstd): y = (x - mean) * rstd * gamma + beta over the last axis."""
    return VERSIONS[DEFAULT](x, gamma, beta, eps)
