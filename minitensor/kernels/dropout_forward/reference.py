"""Inverted dropout (§5.4 "Residual Dropout", P_drop = 0.1), the spec: plain NumPy.

Shapes: any; u has x's shape.
"""
import numpy as np

from ..bf16_cast.reference import as_float64, from_float64


def dropout_forward_ref(x, u, p):
    """y = x / (1 - p) where u >= p, else 0. The backward is the same call on dy with the same u.

    p >= 1 drops everything (no division by zero). Returns y in x's dtype (bf16 as uint16 bits).
    """
    x64 = as_float64(x)
    if p >= 1.0:
        return np.zeros_like(x)
    keep = np.asarray(u) >= p  # kept with probability 1 - p
    y = np.where(keep, x64 / (1.0 - p), 0.0)  # scale up so E[y] = x
    return from_float64(y, x.dtype)
