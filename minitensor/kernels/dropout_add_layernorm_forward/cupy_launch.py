"""The post-norm sub-layer connection's forward on the GPU: grid/block arithmetic and launch of cuda.cu.

v1: one warp per row held in registers, 32 * VPT >= D (block/32 rows per block)

Shapes: x, s (..., D), u like x or None; bias, gamma, beta (D,). y, z come back in x's dtype,
mean and rstd of shape x.shape[:-1] in float32 (float64 for float64 x). D <= 1024 (a row in a
warp's registers): `fits` says whether a shape does.
`dropout_add_layernorm_forward_seeded` draws u inside the kernel (CupyBackend.uniform's numbers, of the
(B, T, D) transpose when time_major): what CupyBackend runs in training.
"""
from __future__ import annotations

import numpy as np

from ..cupy_launcher import CTYPES, VPTS, CudaKernels, acc_dtype, ceil_div, fit_block, vpt_for

CUDA = CudaKernels("dropout_add_layernorm_forward",
                   [f"dropout_add_layernorm_forward_v1<{t}, {k}>" for t in CTYPES.values() for k in VPTS])


def fits(D: int) -> bool:
    return D <= 32 * VPTS[-1]


def launch_v1(x, s, u, p, bias, gamma, beta, eps, seed=0, time_major=False, block=128):
    import cupy as cp

    x = cp.ascontiguousarray(x)
    D = x.shape[-1]
    if x.dtype not in CTYPES or not fits(D):
        raise ValueError(f"dropout_add_layernorm_forward: a float array of rows of at most 1024, got {x.dtype} {x.shape}")
    acc = acc_dtype(x.dtype)
    rows = x.size // max(D, 1)
    s = cp.ascontiguousarray(s, dtype=x.dtype)
    y, z = cp.empty_like(x), cp.empty_like(x)
    mean, rstd = cp.empty(x.shape[:-1], dtype=acc), cp.empty(x.shape[:-1], dtype=acc)
    if rows and D:
        drop = p > 0.0
        u = cp.ascontiguousarray(u, dtype=cp.float32) if drop and u is not None else None
        positions, batch = x.shape[:2] if time_major else (0, 0)
        kernel = CUDA.function(f"dropout_add_layernorm_forward_v1<{CTYPES[x.dtype]}, {vpt_for(D)}>")
        block = fit_block(kernel, block)
        args = (y, z, mean, rstd, x, s, x if bias is None else cp.ascontiguousarray(bias, dtype=x.dtype),
                np.int32(bias is not None), cp.ascontiguousarray(gamma, dtype=acc),
                cp.ascontiguousarray(beta, dtype=acc), acc(eps), x if u is None else u, np.int32(u is not None),
                np.uint64(seed), np.float64(np.float32(p)), acc(1.0 / (1.0 - p)), np.int32(drop), np.int64(rows),
                np.int32(D), np.int64(positions), np.int64(batch))
        kernel((ceil_div(rows, block // 32),), (block,), args)  # one warp per row
    return y, z, mean, rstd


def dropout_add_layernorm_forward_seeded(x, s, seed, p, bias, gamma, beta, eps, time_major=False):
    """(y, z, mean, rstd), the dropout's u = CupyBackend.uniform(seed)'s draws made inline."""
    return launch_v1(x, s, None, p, bias, gamma, beta, eps, seed=seed, time_major=time_major)


VERSIONS = {1: launch_v1}
DEFAULT = 1
BLOCKS = {1: (32, 128, 256, 1024)}  # tested configs


def dropout_add_layernorm_forward(x, s, u, p, bias, gamma, beta, eps):
    """(y, z, mean, rstd): z = x + Dropout(s + bias) with draws u (None when p = 0), y = LayerNorm(z)."""
    return VERSIONS[DEFAULT](x, s, u, p, bias, gamma, beta, eps)
