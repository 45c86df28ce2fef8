"""Softmax backward, the spec: plain NumPy, float64 sums.

Shapes: L = length of the last axis; leading axes are any batch of rows.
"""
from ..bf16_cast.reference import as_float64, from_float64


def softmax_backward_ref(y, dy, scale):
    """dx = scale * y * (dy - sum(dy * y, -1, keepdims)).

    Derivation: dy_j/dz_i = y_j (delta_ij - y_i) with z = scale * x, then the chain rule
    through the scale. Blocked entries have y = 0, so their dx is 0. Returns dx in y's dtype
    (bf16 as uint16 bits; dy is read in its own dtype).
    """
    y64 = as_float64(y)  # (..., L)
    dy64 = as_float64(dy)  # (..., L)
    dot = (dy64 * y64).sum(axis=-1, keepdims=True)  # (..., 1)
    dx = scale * y64 * (dy64 - dot)  # (..., L)
    return from_float64(dx, y.dtype)
