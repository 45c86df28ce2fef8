"""Softmax forward, the spec (§3.2.1 Eq. (1), masking §3.2.3): plain NumPy, float64 sums.

Shapes: L = length of the last axis (keys); leading axes are any batch of rows.
"""
import numpy as np


def softmax_forward_ref(x, scale, mask):
    """y = softmax(scale * x) over the last axis; mask True = blocked (set to -inf first).

    A row with every entry blocked gives zeros, not NaN. Returns y in x's dtype.
    """
    z = np.asarray(x, dtype=np.float64) * scale  # (..., L)
    if mask is not None:
        z = np.where(np.broadcast_to(mask, z.shape), -np.inf, z)  # §3.2.3: blocked -> -inf
    row_max = z.max(axis=-1, keepdims=True)  # (..., 1), -inf on fully blocked rows
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)  # keep exp(-inf - 0) = 0, no NaN
    e = np.exp(z - row_max)  # (..., L)
    total = e.sum(axis=-1, keepdims=True)  # (..., 1)
    y = np.divide(e, total, out=np.zeros_like(e), where=total > 0)  # fully blocked -> 0
    return y.astype(x.dtype)
