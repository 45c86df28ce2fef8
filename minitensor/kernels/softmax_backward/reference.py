"""Softmax backward, the spec: plain NumPy, float64 sums.

Shapes: L = length of the last axis; leading axes are any batch of rows.
"""
import numpy as np


def softmax_backward_ref(y, dy, scale):
    """dx = scale * y * (dy - sum(dy * y, -1, keepdims)).

    Derivation: dy_j/dz_i = y_j (delta_ij - y_i) with z = scale * x, then the chain rule
    through the scale. Blocked entries have y = 0, so their dx is 0. Returns dx in y's dtype.
    """
    y64 = np.asarray(y, dtype=np.float64)  # (..., L)
    dy64 = np.asarray(dy, dtype=np.float64)  # (..., L)
    dot = (dy64 * y64).sum(axis=-1, keepdims=True)  # (..., 1)
    dx = scale * y64 * (dy64 - dot)  # (..., L)
    return dx.astype(y.dtype)
