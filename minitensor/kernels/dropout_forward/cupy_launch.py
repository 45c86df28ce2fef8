"""Inverted dropout on the GPU: grid/block arithmetic and launch of cuda.cu (§5.4).

v1: one thread per element (block = threads per block)

Shapes: any; u has x's shape (uniform [0, 1) draws from the caller's RNG).
`dropout_seeded(x, seed, p)` is v1 with the draws made inside the kernel (the SplitMix64 of
CupyBackend.uniform, the same u for the same seed): what CupyBackend.dropout runs in training.
"""
from __future__ import annotations

import numpy as np

from ..cupy_launcher import CTYPES, CudaKernels, acc_dtype, ceil_div

CUDA = CudaKernels("dropout_forward",
                   [*(f"dropout_forward_v1<{t}, {u}>" for t in CTYPES.values() for u in CTYPES.values()),
                    *(f"dropout_forward_v1_seeded{k}<{t}>" for t in CTYPES.values() for k in ("", "_time_major"))])
MAX_GRID_Y = 65535


def launch_v1(x, u, p, block=256):
    import cupy as cp

    x, u = cp.ascontiguousarray(x), cp.ascontiguousarray(u)
    if x.dtype not in CTYPES or u.dtype not in CTYPES or u.shape != x.shape:
        raise TypeError(f"dropout_forward: bad inputs {x.dtype} {x.shape}, {u.dtype} {u.shape}")
    if p >= 1.0:
        return cp.zeros_like(x)  # everything dropped, and no division by zero
    y = cp.empty_like(x)
    if x.size == 0:
        return y
    acc = acc_dtype(x.dtype)
    p_u = np.float64(u.dtype.type(p))  # NumPy compares u >= p in u's dtype
    kernel = CUDA.function(f"dropout_forward_v1<{CTYPES[x.dtype]}, {CTYPES[u.dtype]}>")
    kernel((ceil_div(x.size, block),), (block,), (y, x, u, p_u, acc(1.0 / (1.0 - p)), np.int64(x.size)))
    return y


def dropout_seeded(x, seed, p, time_major=False, block=256):
    """y = x / (1 - p) where u >= p, else 0, with u = CupyBackend.uniform(seed, x.shape) made inline.

    time_major: x is (T, B, ...) and gets the u of its (B, T, ...) transpose (Backend.dropout).
    """
    import cupy as cp

    x = cp.ascontiguousarray(x)
    if x.dtype not in CTYPES:
        raise TypeError(f"dropout_seeded: unsupported dtype {x.dtype}")
    if p >= 1.0:
        return cp.zeros_like(x)
    y = cp.empty_like(x)
    if x.size:
        head = (y, x, np.uint64(seed), np.float64(np.float32(p)), acc_dtype(x.dtype)(1.0 / (1.0 - p)))
        if time_major:
            T, B = x.shape[:2]
            W = x.size // (T * B)
            kernel = CUDA.function(f"dropout_forward_v1_seeded_time_major<{CTYPES[x.dtype]}>")
            kernel((ceil_div(W, block), min(T * B, MAX_GRID_Y)), (block,), (*head, np.int64(T), np.int64(B), np.int32(W)))
        else:
            kernel = CUDA.function(f"dropout_forward_v1_seeded<{CTYPES[x.dtype]}>")
            kernel((ceil_div(x.size, block),), (block,), (*head, np.int64(x.size)))
    return y


VERSIONS = {1: launch_v1}
DEFAULT = 1
BLOCKS = {1: (64, 256, 1024)}  # tested configs


def dropout_forward(x, u, p):
    """y = x / (1 - p) where u >= p, else 0 (the backward is the same call on dy)."""
    return VERSIONS[DEFAULT](x, u, p)
