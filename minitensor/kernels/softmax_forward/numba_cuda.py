"""Softmax forward with numba.cuda (§3.2.1 Eq. (1), masking §3.2.3); spec: reference.py.

v1: one block per row: strided loops over the row, max and sum by tree reduction in shared memory;
    non-finite entries as in reference.py (NaN rows, +inf maxima, rows with nothing above -inf)

Python you can step through: it also runs on the CPU under the CUDA simulator
(NUMBA_ENABLE_CUDASIM=1, set before Python starts), which is how CI tests it.
Shapes: L = keys per row. Unlike cuda.cu, the mask is broadcast and copied to x's shape:
simple beats fast here. float32 and float64 (statistics in float64 for float64 input).
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
    def block_reduce(red, tid, value, take_max):
        """Max (take_max) or sum of `value` over the block: a tree in shared memory."""
        red[tid] = value
        cuda.syncthreads()
        half = THREADS // 2
        while half > 0:
            if tid < half:
                other = red[tid + half]
                if take_max:
                    if other > red[tid]:
                        red[tid] = other
                else:
                    red[tid] += other
            cuda.syncthreads()
            half //= 2
        total = red[0]
        cuda.syncthreads()  # everyone has read red[0] before it is reused
        return total

    @cuda.jit(device=True)
    def term(v, m):
        """e^(v - m); for a +inf max m, 1 on the +inf entries and 0 elsewhere; -inf entries 0."""
        if m == math.inf:
            return acc(1.0) if v == m else acc(0.0)
        if v == -math.inf:
            return acc(0.0)
        return math.exp(v - m)

    @cuda.jit
    def softmax_forward_v1(x2, scale, mask2, has_mask, y2):
        row, tid = cuda.blockIdx.x, cuda.threadIdx.x
        L = x2.shape[1]
        red = cuda.shared.array(THREADS, dtype=acc)
        # 1) row max over unblocked entries (a NaN never wins; they are counted instead)
        m, nans = acc(-math.inf), acc(0.0)
        for j in range(tid, L, THREADS):
            if not (has_mask and mask2[row, j]):
                v = scale * acc(x2[row, j])
                if v > m:
                    m = v
                if v != v:
                    nans += 1
        m = block_reduce(red, tid, m, True)
        nans = block_reduce(red, tid, nans, False)
        # 2) sum of the terms (for a +inf max: the number of +inf entries)
        total = acc(0.0)
        for j in range(tid, L, THREADS):
            if not (has_mask and mask2[row, j]):
                total += term(scale * acc(x2[row, j]), m)
        total = block_reduce(red, tid, total, False)
        inv = acc(1.0) / total if total > 0 else acc(0.0)  # fully blocked row -> zeros
        # 3) write: a row with a NaN is all NaN
        for j in range(tid, L, THREADS):
            if nans > 0:
                y2[row, j] = math.nan
            elif has_mask and mask2[row, j]:
                y2[row, j] = 0.0
            else:
                y2[row, j] = term(scale * acc(x2[row, j]), m) * inv

    return softmax_forward_v1


def _array_module(x):
    if hasattr(x, "__cuda_array_interface__"):  # a CuPy array: stay on the device
        import cupy

        return cupy
    return np  # NumPy: numba copies to the device and back


def launch_v1(x, scale, mask):
    xp = _array_module(x)
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"numba_cuda softmax_forward: float32 or float64, got {x.dtype}")
    L = x.shape[-1]
    x2 = xp.ascontiguousarray(x).reshape(-1, L)  # (rows, L)
    y2 = xp.empty_like(x2)
    has_mask = mask is not None
    if has_mask:
        mask2 = xp.ascontiguousarray(xp.broadcast_to(xp.asarray(mask, dtype=bool), x.shape)).reshape(-1, L)
    else:
        mask2 = xp.zeros((1, 1), dtype=bool)  # never read
    acc = np.float64 if x.dtype == np.float64 else np.float32
    if x2.shape[0] and L:
        _kernel(acc)[x2.shape[0], THREADS](x2, acc(scale), mask2, has_mask, y2)  # a block per row
    return y2.reshape(x.shape)


VERSIONS = {1: launch_v1}
DEFAULT = 1


def softmax_forward(x, scale, mask):
    """y = softmax(scale * x) over the last axis, blocked (mask True) entries -> 0."""
    return VERSIONS[DEFAULT](x, scale, mask)
