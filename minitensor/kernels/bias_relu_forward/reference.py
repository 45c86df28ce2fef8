"""Bias + ReLU, the spec: plain NumPy in float64 (§3.3, Eq. (2): max(0, xW₁ + b₁), after the product).

Shapes: x (..., C) (a matrix product's output, rows of C = d_ff), bias (C,).
"""
import numpy as np

from ..bf16_cast.reference import as_float64, from_float64


def bias_relu_forward_ref(x, bias):
    """In place: x = max(0, x + bias), rounded once to x's dtype (bf16 as uint16 bits). Returns x.

    In place because x is a product's fresh output that nothing else reads: one pass over it.
    bias may be x's dtype or float32 (a master under half-precision x).
    """
    y = np.maximum(as_float64(x) + as_float64(bias), 0.0)
    x[...] = from_float64(y, x.dtype)
    return x
