"""LayerNorm forward with numba.cuda (§3.1); spec: reference.py.

v1: one block per row: strided loops, sum and sum of squared deviations by tree reduction

Python you can step through: it also runs on the CPU under the CUDA simulator
(NUMBA_ENABLE_CUDASIM=1, set before Python starts), which is how CI tests it.
Shapes: D = d_model, rows = prod(x.shape[:-1]). float32 and float64; mean and rstd come
back in float32 (float64 for float64 x), y in x's dtype.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..numba_cuda_compat import import_numba_cuda

cuda = import_numba_cuda()
THREADS = 64  # threads per block = slots of the shared-memory reduction (a power of two)


@functools.cache
def _kernel(acc):
    """The v1 kernel with statistics in `acc` (np.float32 or np.float64), compiled on first use."""

    @cuda.jit(device=True)
    def block_sum(red, tid, value):
        """Sum `value` over the block: a tree in shared memory, log2(THREADS) steps."""
        red[tid] = value
        cuda.syncthreads()
        half = THREADS // 2
        while half > 0:
            if tid < half:
                red[tid] += red[tid + half]
            cuda.syncthreads()
            half //= 2
        total = red[0]
        cuda.syncthreads()  # everyone has read red[0] before it is reused
        return total

    @cuda.jit
    def layernorm_forward_v1(x2, gamma, beta, eps, y2, mean, rstd):
        row, tid = cuda.blockIdx.x, cuda.threadIdx.x
        D = x2.shape[1]
        red = cuda.shared.array(THREADS, dtype=acc)
        partial = acc(0.0)
        for j in range(tid, D, THREADS):
            partial += acc(x2[row, j])
        mu = block_sum(red, tid, partial) / D
        partial = acc(0.0)
        for j in range(tid, D, THREADS):
            centred = acc(x2[row, j]) - mu
            partial += centred * centred
        rs = acc(1.0) / math.sqrt(block_sum(red, tid, partial) / D + eps)  # biased variance
        for j in range(tid, D, THREADS):
            y2[row, j] = (acc(x2[row, j]) - mu) * rs * gamma[j] + beta[j]
        if tid == 0:
            mean[row] = mu
            rstd[row] = rs

    return layernorm_forward_v1


def _array_module(x):
    if hasattr(x, "__cuda_array_interface__"):  # a CuPy array: stay on the device
        import cupy

        return cupy
    return np  # NumPy: numba copies to the device and back


def launch_v1(x, gamma, beta, eps):
    xp = _array_module(x)
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"numba_cuda layernorm_forward: float32 or float64, got {x.dtype}")
    acc = np.float64 if x.dtype == np.float64 else np.float32
    D = x.shape[-1]
    x2 = xp.ascontiguousarray(x).reshape(-1, D)  # (rows, D)
    rows = x2.shape[0]
    y2 = xp.empty_like(x2)
    mean, rstd = xp.empty(rows, dtype=acc), xp.empty(rows, dtype=acc)  # (rows,)
    gamma = xp.ascontiguousarray(gamma, dtype=acc)  # (D,)
    beta = xp.ascontiguousarray(beta, dtype=acc)  # (D,)
    if rows and D:
        _kernel(acc)[rows, THREADS](x2, gamma, beta, acc(eps), y2, mean, rstd)  # a block per row
    lead = x.shape[:-1]
    return y2.reshape(x.shape), mean.reshape(lead), rstd.reshape(lead)


VERSIONS = {1: launch_v1}
DEFAULT = 1


def layernorm_forward(x, gamma, beta, eps):
    """(y, mean, rstd): y = (x - mean) * rstd * gamma + beta over the last axis."""
    return VERSIONS[DEFAULT](x, gamma, beta, eps)
