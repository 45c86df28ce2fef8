"""The backward of adding a bias (through a ReLU or not), the spec: plain NumPy, float64 sums.

Shapes: dy (..., R, C): R rows of C columns, with any leading (batch) axes; relu_out like dy or None.
"""
import numpy as np

from ..bf16_cast.reference import as_float64, from_float64


def bias_backward_ref(dy, relu_out, dtype):
    """(dx, db) for y = x + b (relu_out None) or y = max(0, x + b) (relu_out = y).

    dx = dy where relu_out > 0, else 0 (dy itself, not a copy, without relu_out), in dy's dtype;
    db = Σ over the rows (axis -2) of dx, summed in float64 and written in `dtype` (the bias's
    master: float32 under half-precision dy, never rounded to half): shape dy.shape[:-2] + (C,).
    """
    d64 = as_float64(dy)
    if relu_out is not None:
        d64 = np.where(as_float64(relu_out) > 0, d64, 0.0)
        dx = from_float64(d64, dy.dtype)
    else:
        dx = dy
    return dx, d64.sum(axis=-2).astype(dtype)
