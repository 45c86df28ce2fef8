"""LayerNorm backward on the GPU: grid/block arithmetic and launch of cuda.cu.

v1: dx one thread per row, then dgamma/dbeta one thread per column (block = threads)
v2: fused dx + per-block column sums (grid <= 2 blocks per SM), then one sum over blocks;
    D > 1024 falls back to v1

Shapes: D = d_model, rows = prod(x.shape[:-1]). dx comes back in x's dtype, dgamma and
dbeta in gamma's dtype (summed in float32, or float64 for float64 inputs).
"""
from __future__ import annotations

import numpy as np

from ..cupy_launcher import CTYPES, VPTS, CudaKernels, acc_dtype, ceil_div, fit_block, sm_count, vpt_for

CUDA = CudaKernels("layernorm_backward", [
    *(f"{k}<{t}>" for t in CTYPES.values()
      for k in ("layernorm_backward_v1", "layernorm_backward_v1_params", "layernorm_backward_v2_params")),
    *(f"layernorm_backward_v2<{t}, {k}>" for t in CTYPES.values() for k in VPTS),  # VPTS: values per lane
])


def _prepare(dy, x, gamma, mean, rstd):
    import cupy as cp

    x = cp.ascontiguousarray(x)
    if x.dtype not in CTYPES:
        raise TypeError(f"layernorm_backward: unsupported dtype {x.dtype}")
    acc = acc_dtype(x.dtype)  # statistics dtype
    D = x.shape[-1]
    rows = x.size // max(D, 1)
    inputs = (cp.ascontiguousarray(dy, dtype=x.dtype), x, cp.ascontiguousarray(gamma, dtype=acc),
              cp.ascontiguousarray(mean, dtype=acc), cp.ascontiguousarray(rstd, dtype=acc))
    new = cp.zeros if rows == 0 else cp.empty  # every _params kernel writes all D columns: no memsets
    dgamma, dbeta = new(D, dtype=acc), new(D, dtype=acc)
    return inputs, cp.empty_like(x), dgamma, dbeta, rows, D


def _finish(dx, dgamma, dbeta, gamma):
    return dx, dgamma.astype(gamma.dtype, copy=False), dbeta.astype(gamma.dtype, copy=False)


def launch_v1(dy, x, gamma, mean, rstd, block=128):
    (dy_, x_, gamma_, mean_, rstd_), dx, dgamma, dbeta, rows, D = _prepare(dy, x, gamma, mean, rstd)
    if rows == 0 or D == 0:
        return _finish(dx, dgamma, dbeta, gamma)
    t = CTYPES[x_.dtype]
    size = (np.int64(rows), np.int32(D))
    rows_kernel = CUDA.function(f"layernorm_backward_v1<{t}>")
    block_r = fit_block(rows_kernel, block)
    rows_kernel((ceil_div(rows, block_r),), (block_r,), (dx, dy_, x_, gamma_, mean_, rstd_, *size))
    cols_kernel = CUDA.function(f"layernorm_backward_v1_params<{t}>")
    block_c = fit_block(cols_kernel, block)
    cols_kernel((ceil_div(D, block_c),), (block_c,), (dgamma, dbeta, dy_, x_, mean_, rstd_, *size))
    return _finish(dx, dgamma, dbeta, gamma)


def launch_v2(dy, x, gamma, mean, rstd, block=256):
    import cupy as cp

    if x.shape[-1] > 32 * VPTS[-1]:
        return launch_v1(dy, x, gamma, mean, rstd)  # row does not fit in a warp's registers
    (dy_, x_, gamma_, mean_, rstd_), dx, dgamma, dbeta, rows, D = _prepare(dy, x, gamma, mean, rstd)
    if rows == 0 or D == 0:
        return _finish(dx, dgamma, dbeta, gamma)
    t, acc = CTYPES[x_.dtype], gamma_.dtype
    kernel = CUDA.function(f"layernorm_backward_v2<{t}, {vpt_for(D)}>")
    block = fit_block(kernel, block)
    warps = block // 32
    grid = min(ceil_div(rows, warps), 2 * sm_count())  # few blocks: few partial rows to sum
    partial = cp.empty((grid, 2, D), dtype=acc)  # per block: sum dy*xhat, sum dy
    args = (dx, partial, dy_, x_, gamma_, mean_, rstd_, np.int64(rows), np.int32(D))
    kernel((grid,), (block,), args, shared_mem=2 * D * acc.itemsize)
    CUDA.function(f"layernorm_backward_v2_params<{t}>")(
        (ceil_div(D, 128),), (128,), (dgamma, dbeta, partial, np.int32(grid), np.int32(D)))
    return _finish(dx, dgamma, dbeta, gamma)


VERSIONS = {1: launch_v1, 2: launch_v2}
DEFAULT = 2
BLOCKS = {1: (32, 128, 256), 2: (32, 128, 256, 1024)}  # tested configs


def layernorm_backward(dy, x, gamma, mean, rstd):
    """(dx, dgamma, dbeta) of y = (x - mean) * rstd * gamma + beta."""
    return VERSIONS[DEFAULT](dy, x, gamma, mean, rstd)
