"""LayerNorm backward, the spec: plain NumPy, float64 sums.

Shapes: D = d_model (normalised last axis); leading axes are any batch of rows.
"""
import numpy as np

from ..bf16_cast.reference import as_float64, from_float64


def layernorm_backward_ref(dy, x, gamma, mean, rstd):
    """Gradients of y = xhat * gamma + beta with xhat = (x - mean) * rstd.

    With g = dy * gamma: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
    dgamma = sum_rows(dy * xhat), dbeta = sum_rows(dy).
    Returns dx in x's dtype and dgamma, dbeta in gamma's dtype (float32 masters under half x:
    the column sums are never rounded to half precision). x, dy may be bf16 (uint16 bits).
    """
    dy64 = as_float64(dy)  # (..., D)
    D = dy64.shape[-1]
    rows = dy64.reshape(-1, D)  # (N, D)
    x64 = as_float64(x).reshape(-1, D)  # (N, D)
    mean64 = np.asarray(mean, dtype=np.float64).reshape(-1, 1)  # (N, 1)
    rstd64 = np.asarray(rstd, dtype=np.float64).reshape(-1, 1)  # (N, 1)
    xhat = (x64 - mean64) * rstd64  # (N, D)
    g = rows * np.asarray(gamma, np.float64)  # (N, D)
    # term 1: g; term 2: -mean(g) (through the mean); term 3: -xhat*mean(g*xhat) (through rstd)
    dx = rstd64 * (g - g.mean(axis=1, keepdims=True) - xhat * (g * xhat).mean(axis=1, keepdims=True))
    dgamma = (rows * xhat).sum(axis=0)  # (D,)
    dbeta = rows.sum(axis=0)  # (D,)
    return (from_float64(dx.reshape(dy64.shape), x.dtype), dgamma.astype(gamma.dtype),
            dbeta.astype(gamma.dtype))
