"""Matrix product, the spec for the teaching GEMMs in cuda.cu: plain NumPy, float64 sums.

Shapes: a (M, K), b (K, N) -> c (M, N).
"""
import numpy as np


def matmul_forward_ref(a, b):
    """c[i, j] = sum_k a[i, k] * b[k, j], summed in float64, returned in a's dtype."""
    c = np.asarray(a, dtype=np.float64) @ np.asarray(b, dtype=np.float64)  # (M, N)
    return c.astype(a.dtype)
