"""Softmax backward on the CPU with Numba; spec: reference.py.

v1: naive port of the reference, one row per prange iteration, float64 dot product
v2: dot product and update in the input dtype with fastmath so LLVM vectorises both row loops

Shapes: N = rows (every leading axis merged), L = entries per row.
"""
import numpy as np
from numba import njit, prange

FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}


@njit(cache=True, parallel=True)
def softmax_backward_v1(y, dy, scale, dx):
    N, L = y.shape
    for i in prange(N):
        dot = 0.0
        for j in range(L):
            dot += np.float64(dy[i, j]) * np.float64(y[i, j])
        for j in range(L):
            dx[i, j] = scale * y[i, j] * (dy[i, j] - dot)


@njit(cache=True, parallel=True, fastmath=FASTMATH)
def softmax_backward_v2(y, dy, scale, dx):
    N, L = y.shape
    for i in prange(N):
        dot = 0 * scale  # zero in the input dtype (wrapper casts scale)
        for j in range(L):
            dot += dy[i, j] * y[i, j]
        for j in range(L):
            dx[i, j] = scale * y[i, j] * (dy[i, j] - dot)


VERSIONS = {1: softmax_backward_v1, 2: softmax_backward_v2}
DEFAULT = 2


def softmax_backward(y, dy, scale):
    """dx = scale * y * (dy - sum(dy * y, -1, keepdims)) over the last axis."""
    L = y.shape[-1]
    y2 = np.ascontiguousarray(y).reshape(-1, L)  # (N, L)
    dy2 = np.ascontiguousarray(dy, dtype=y.dtype).reshape(-1, L)  # (N, L)
    dx2 = np.empty_like(y2)
    VERSIONS[DEFAULT](y2, dy2, y.dtype.type(scale), dx2)
    return dx2.reshape(y.shape)
