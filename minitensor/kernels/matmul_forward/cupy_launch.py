"""Teaching GEMMs on the GPU: grid/block arithmetic and launch of cuda.cu.

v0: cuBLAS through cupy.matmul: the default and the unit of measurement
v1: naive, one thread per output (block (32, 8)); float32
v2: 32x32 shared-memory tiles (block (32, 32)); float32
v3: 128x128x8 register-blocked tiles, 8x8 outputs a thread (256 threads); float32
v4: fp16 tensor cores (mma.sync, fp32 accumulation), 128x128x32 tiles (256 threads); float16,
    K and N padded to multiples of 8 here when needed
v5: v3 compiled for two blocks per SM (128 registers a thread instead of 159); float32

Shapes: a (M, K), b (K, N) -> c (M, N). Pick a kernel by name: VERSIONS[NAMES["register_tiled"]].
"""
from __future__ import annotations

import numpy as np

from ..cupy_launcher import CudaKernels, ceil_div

NAMES = {"cublas": 0, "naive": 1, "smem_tiled": 2, "register_tiled": 3, "tensor_core_fp16": 4,
         "register_tiled_2_blocks": 5}
CUDA = CudaKernels("matmul_forward")  # extern "C" kernels: fetched by their plain names


def _check(a, b, dtype, version):
    import cupy as cp

    if a.dtype != dtype or b.dtype != dtype or a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise TypeError(f"matmul_forward v{version}: need {np.dtype(dtype)} (M, K) @ (K, N), "
                        f"got {a.dtype} {a.shape} @ {b.dtype} {b.shape}")
    return cp.ascontiguousarray(a), cp.ascontiguousarray(b)


def _launch_fp32(version, a, b, block, tile_m, tile_n):
    import cupy as cp

    a, b = _check(a, b, np.float32, version)
    (M, K), N = a.shape, b.shape[1]
    c = cp.empty((M, N), dtype=cp.float32)
    if M and N:
        grid = (ceil_div(N, tile_n), ceil_div(M, tile_m))  # x over N, y over M
        args = (c, a, b, np.int32(M), np.int32(N), np.int32(K))
        CUDA.function(f"matmul_forward_v{version}")(grid, block, args)
    return c


def launch_v0(a, b):
    import cupy as cp

    return cp.matmul(a, b)


def launch_v1(a, b):
    return _launch_fp32(1, a, b, (32, 8), 8, 32)


def launch_v2(a, b):
    return _launch_fp32(2, a, b, (32, 32), 32, 32)


def launch_v3(a, b):
    return _launch_fp32(3, a, b, (256,), 128, 128)


def launch_v5(a, b):
    return _launch_fp32(5, a, b, (256,), 128, 128)


def _pad_to_8(x, axis):
    """Zero-pad one axis to a multiple of 8 (cp.async copies 8 halves = 16 bytes at a time)."""
    import cupy as cp

    extra = -x.shape[axis] % 8
    if extra == 0 and x.data.ptr % 16 == 0:
        return x
    pad = [(0, 0), (0, 0)]
    pad[axis] = (0, extra)
    return cp.pad(x, pad)  # a fresh, aligned allocation


def launch_v4(a, b):
    import cupy as cp

    a, b = _check(a, b, np.float16, 4)
    M, N = a.shape[0], b.shape[1]
    a8 = _pad_to_8(a, 1)  # (M, K8)
    b8 = _pad_to_8(_pad_to_8(b, 0), 1)  # (K8, N8): padded rows of B meet padded zeros of A
    N8 = b8.shape[1]
    c = cp.empty((M, N8), dtype=cp.float16)
    if M and N:
        grid = (ceil_div(N8, 128), ceil_div(M, 128))
        args = (c, a8, b8, np.int32(M), np.int32(N8), np.int32(a8.shape[1]))
        CUDA.function("matmul_forward_v4")(grid, (256,), args)
    return c if N8 == N else cp.ascontiguousarray(c[:, :N])


VERSIONS = {0: launch_v0, 1: launch_v1, 2: launch_v2, 3: launch_v3, 4: launch_v4, 5: launch_v5}
DEFAULT = 0
DTYPES = {0: (np.float32, np.float16), 1: (np.float32,), 2: (np.float32,), 3: (np.float32,),
          4: (np.float16,), 5: (np.float32,)}  # what each version accepts


def matmul_forward(a, b):
    """c = a @ b (cuBLAS by default; the teaching kernels via VERSIONS / NAMES)."""
    return VERSIONS[DEFAULT](a, b)
