"""Inverted dropout on the CPU with Numba (§5.4); spec: reference.py.

v1: naive port of the reference, one element per prange iteration, divide by (1 - p) each time
v2: multiply by a precomputed 1/(1 - p) in x's dtype, branch-free select, fastmath so the loop vectorises

Shapes: flat views of x, u and y (any shape, same number of elements).
"""
import numpy as np
from numba import njit, prange

FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}


@njit(cache=True, parallel=True)
def dropout_forward_v1(x, u, p, y):
    for i in prange(x.size):
        if p >= 1.0 or u[i] < p:
            y[i] = 0.0
        else:
            y[i] = x[i] / (1.0 - p)


@njit(cache=True, parallel=True, fastmath=FASTMATH)
def dropout_forward_v2(x, u, p, y):
    keep_scale = x.dtype.type(1.0 / (1.0 - p)) if p < 1.0 else x.dtype.type(0.0)
    p_u = u.dtype.type(p)  # compare in u's dtype: no per-element conversion
    zero = x.dtype.type(0.0)
    for i in prange(x.size):
        y[i] = x[i] * keep_scale if u[i] >= p_u else zero


VERSIONS = {1: dropout_forward_v1, 2: dropout_forward_v2}
DEFAULT = 2


def dropout_forward(x, u, p):
    """y = x / (1 - p) where u >= p, else 0 (u: uniform [0, 1) draws of x's shape)."""
    x1 = np.ascontiguousarray(x).reshape(-1)
    u1 = np.ascontiguousarray(u).reshape(-1)
    y1 = np.empty_like(x1)
    VERSIONS[DEFAULT](x1, u1, float(p), y1)
    return y1.reshape(x.shape)
