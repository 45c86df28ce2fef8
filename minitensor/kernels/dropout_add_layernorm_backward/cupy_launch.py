"""The post-norm sub-layer connection's backward on the GPU: grid/block arithmetic and launch of cuda.cu.

v1: one warp per row in registers writing dx, ds and per-block column sums (grid <= 2 blocks per SM),
    then one sum over the blocks per column

Shapes: dys: one or two gradients (..., D) of y; z like them; gamma (D,); mean, rstd (...). dx, ds
come back in z's dtype (ds is dx when p = 0), dgamma, dbeta, dbias in gamma's dtype (dbias None
without a bias). D <= 1024. `dropout_add_layernorm_backward_seeded` draws the mask inside the kernel.
"""
from __future__ import annotations

import numpy as np

from ..cupy_launcher import CTYPES, VPTS, CudaKernels, acc_dtype, ceil_div, fit_block, sm_count, vpt_for

CUDA = CudaKernels("dropout_add_layernorm_backward", [
    *(f"dropout_add_layernorm_backward_v1<{t}, {k}>" for t in CTYPES.values() for k in VPTS),
    *(f"dropout_add_layernorm_backward_v1_params<{t}>" for t in CTYPES.values()),
])


def launch_v1(dys, z, u, p, gamma, mean, rstd, with_bias, seed=0, time_major=False, block=256):
    import cupy as cp

    if len(dys) not in (1, 2):
        raise ValueError(f"dropout_add_layernorm_backward: one or two gradients, got {len(dys)}")
    z = cp.ascontiguousarray(z)
    D = z.shape[-1]
    if z.dtype not in CTYPES or D > 32 * VPTS[-1]:
        raise ValueError(f"dropout_add_layernorm_backward: a float array of rows of at most 1024, got {z.dtype} {z.shape}")
    acc = acc_dtype(z.dtype)
    rows = z.size // max(D, 1)
    dy, dy2 = (cp.ascontiguousarray(d, dtype=z.dtype) for d in (dys[0], dys[-1]))
    drop = p > 0.0
    dx = cp.empty_like(z)
    ds = cp.empty_like(z) if drop else dx
    sums = (cp.zeros if rows == 0 else cp.empty)((3, D), dtype=acc)
    if rows and D:
        u = cp.ascontiguousarray(u, dtype=cp.float32) if drop and u is not None else None
        positions, batch = z.shape[:2] if time_major else (0, 0)
        t = CTYPES[z.dtype]
        kernel = CUDA.function(f"dropout_add_layernorm_backward_v1<{t}, {vpt_for(D)}>")
        block = fit_block(kernel, block)
        grid = min(ceil_div(rows, block // 32), 2 * sm_count())  # few blocks: few partial rows to sum
        partial = cp.empty((grid, 3, D), dtype=acc)
        args = (dx, ds, partial, dy, dy2, np.int32(len(dys) == 2), z, cp.ascontiguousarray(gamma, dtype=acc),
                cp.ascontiguousarray(mean, dtype=acc), cp.ascontiguousarray(rstd, dtype=acc), z if u is None else u,
                np.int32(u is not None), np.uint64(seed), np.float64(np.float32(p)), acc(1.0 / (1.0 - p)),
                np.int32(drop), np.int64(rows), np.int32(D), np.int64(positions), np.int64(batch))
        kernel((grid,), (block,), args, shared_mem=3 * D * np.dtype(acc).itemsize)
        CUDA.function(f"dropout_add_layernorm_backward_v1_params<{t}>")(
            (ceil_div(3 * D, 128),), (128,), (sums, partial, np.int32(grid), np.int32(D)))
    dgamma, dbeta, dbias = (sums[k].astype(gamma.dtype, copy=False) for k in range(3))
    return dx, ds, dgamma, dbeta, dbias if with_bias else None


def dropout_add_layernorm_backward_seeded(dys, z, seed, p, gamma, mean, rstd, with_bias, time_major=False):
    """As dropout_add_layernorm_backward, the mask's u = CupyBackend.uniform(seed)'s draws made inline."""
    return launch_v1(dys, z, None, p, gamma, mean, rstd, with_bias, seed=seed, time_major=time_major)


VERSIONS = {1: launch_v1}
DEFAULT = 1
BLOCKS = {1: (32, 128, 256, 1024)}  # tested configs


def dropout_add_layernorm_backward(dys, z, u, p, gamma, mean, rstd, with_bias):
    """(dx, ds, dgamma, dbeta, dbias) of z = x + Dropout(s + bias), y = LayerNorm(z); dys: 1 or 2 gradients of y."""
    return VERSIONS[DEFAULT](dys, z, u, p, gamma, mean, rstd, with_bias)
