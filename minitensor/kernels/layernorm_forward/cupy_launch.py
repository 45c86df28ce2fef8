"""LayerNorm forward on the GPU: grid/block arithmetic and launch of cuda.cu (§3.1).

v1: one thread per row, two passes + write (block = threads per block)
v2: one warp per row, three passes over global memory (block/32 rows per block)
v3: one warp per row held in registers, 32*VPT >= D; D > 1024 falls back to v2

Shapes: D = d_model, rows = prod(x.shape[:-1]). mean, rstd come back with shape x.shape[:-1]
in float32 (float64 for float64 x); gamma and beta are cast to that dtype (D values, cheap).
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

    names = [f"layernorm_forward_v{v}<{t}>" for v in (1, 2) for t in CTYPES.values()]
    names += [f"layernorm_forward_v3<{t}, {k}>" for t in CTYPES.values() for k in VPTS]
    code = Path(__file__).with_name("cuda.cu").read_text()
    return cp.RawModule(code=code, options=("-std=c++17",), name_expressions=names)


def _fit(kernel, block):
    """The block size, lowered to what the kernel's register use allows (a multiple of 32)."""
    return min(block, kernel.max_threads_per_block)


def _prepare(x, gamma, beta, eps):
    import cupy as cp

    x = cp.ascontiguousarray(x)
    if x.dtype not in CTYPES:
        raise TypeError(f"layernorm_forward: unsupported dtype {x.dtype}")
    acc = np.float64 if x.dtype == np.float64 else np.float32  # statistics dtype
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
        kernel = _module().get_function(f"layernorm_forward_v1<{CTYPES[x.dtype]}>")
        block = _fit(kernel, block)
        kernel(((rows + block - 1) // block,), (block,), args)  # one thread per row
    return args[:3]


def launch_v2(x, gamma, beta, eps, block=128):
    args, rows, D = _prepare(x, gamma, beta, eps)
    if rows and D:
        kernel = _module().get_function(f"layernorm_forward_v2<{CTYPES[x.dtype]}>")
        block = _fit(kernel, block)
        rows_per_block = block // 32  # one warp per row
        kernel(((rows + rows_per_block - 1) // rows_per_block,), (block,), args)
    return args[:3]


def launch_v3(x, gamma, beta, eps, block=128):
    if x.shape[-1] > 32 * VPTS[-1]:
        return launch_v2(x, gamma, beta, eps, block)  # row does not fit in a warp's registers
    args, rows, D = _prepare(x, gamma, beta, eps)
    if rows and D:
        vpt = next(k for k in VPTS if 32 * k >= D)
        kernel = _module().get_function(f"layernorm_forward_v3<{CTYPES[x.dtype]}, {vpt}>")
        block = _fit(kernel, block)
        rows_per_block = block // 32
        kernel(((rows + rows_per_block - 1) // rows_per_block,), (block,), args)
    return args[:3]


VERSIONS = {1: launch_v1, 2: launch_v2, 3: launch_v3}
DEFAULT = 3
BLOCKS = {1: (32, 128, 256), 2: (32, 128, 256, 1024), 3: (32, 128, 256, 1024)}  # tested configs


def layernorm_forward(x, gamma, beta, eps):
    """(y, mean, rstd): y = (x - mean) * rstd * gamma + beta over the last axis."""
    return VERSIONS[DEFAULT](x, gamma, beta, eps)
