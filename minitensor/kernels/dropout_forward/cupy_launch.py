"""Inverted dropout on the GPU: grid/block arithmetic and launch of cuda.cu (§5.4).

v1: one thread per element (block = threads per block)

Shapes: any; u has x's shape (uniform [0, 1) draws from the caller's RNG).
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

CTYPES = {np.dtype(np.float32): "float", np.dtype(np.float16): "f16", np.dtype(np.float64): "double"}


@functools.cache
def _module():
    """Compile cuda.cu once per process (NVRTC through CuPy), every instantiation by name."""
    import cupy as cp

    names = [f"dropout_forward_v1<{t}, {u}>" for t in CTYPES.values() for u in CTYPES.values()]
    code = Path(__file__).with_name("cuda.cu").read_text()
    return cp.RawModule(code=code, options=("-std=c++17",), name_expressions=names)


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
    acc = np.float64 if x.dtype == np.float64 else np.float32
    p_u = np.float64(u.dtype.type(p))  # NumPy compares u >= p in u's dtype
    kernel = _module().get_function(f"dropout_forward_v1<{CTYPES[x.dtype]}, {CTYPES[u.dtype]}>")
    kernel(((x.size + block - 1) // block,), (block,), (y, x, u, p_u, acc(1.0 / (1.0 - p)), np.int64(x.size)))
    return y


VERSIONS = {1: launch_v1}
DEFAULT = 1
BLOCKS = {1: (64, 256, 1024)}  # tested configs


def dropout_forward(x, u, p):
    """y = x / (1 - p) where u >= p, else 0 (the backward is the same call on dy)."""
    return VERSIONS[DEFAULT](x, u, p)
