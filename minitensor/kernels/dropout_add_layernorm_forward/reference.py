"""The post-norm sub-layer connection's forward (§3.1, §5.4), the spec: plain NumPy, float64.

    z = x + Dropout_p(s + bias),  y = LayerNorm(z) = (z - mean) * rstd * gamma + beta

x is the residual stream, s the sub-layer's output before its bias (the bias of W^O or W₂ is
added here, not by the product). Shapes: x, s, u (..., D); bias, gamma, beta (D,).
"""
import numpy as np

from ..bf16_cast.reference import as_float64, from_float64
from ..layernorm_forward.reference import layernorm_forward_ref


def dropout_add_layernorm_forward_ref(x, s, u, p, bias, gamma, beta, eps):
    """(y, z, mean, rstd): z = x + Dropout(s + bias) rounded once to x's dtype, y = LayerNorm(z) in x's dtype.

    u: uniform [0, 1) draws of x's shape (None when p = 0): kept where u >= p, scaled by 1/(1-p)
    (inverted dropout, as dropout_forward). bias: None or (D,). mean, rstd: x.shape[:-1], float32
    (float64 for float64 x). z is what the backward normalises again (saved for it).
    """
    d = as_float64(s) + (0.0 if bias is None else as_float64(bias))
    if p > 0.0:
        d = np.where(np.asarray(u) >= p, d / (1.0 - p), 0.0)
    z = from_float64(as_float64(x) + d, x.dtype)
    y, mean, rstd = layernorm_forward_ref(z, gamma, beta, eps)
    return y, z, mean, rstd
