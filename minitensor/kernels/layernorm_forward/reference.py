"""LayerNorm forward, the spec (§3.1 "LayerNorm(x + Sublayer(x))"): plain NumPy, float64 sums.

Shapes: D = d_model (normalised last axis); leading axes are any batch of rows.
"""
import numpy as np

from ..bf16_cast.reference import as_float64, from_float64


def _stats_dtype(dtype):
    """float64 stays float64; float32 and float16 keep their statistics in float32."""
    return np.float64 if dtype == np.float64 else np.float32


def layernorm_forward_ref(x, gamma, beta, eps):
    """mean, rstd = 1/sqrt(var + eps) (biased variance) over D; y = (x - mean) * rstd * gamma + beta.

    Returns (y in x's dtype, mean, rstd), mean and rstd of shape x.shape[:-1] in float32
    (float64 for float64 input); they are saved for the backward. x may be bf16 (uint16 bits);
    gamma and beta are read in their own dtype (float32 masters under half-precision x).
    """
    x64 = as_float64(x)  # (..., D)
    mean = x64.mean(axis=-1)  # (...,)
    xc = x64 - mean[..., None]  # (..., D)
    var = (xc * xc).mean(axis=-1)  # (...,) biased: divide by D
    rstd = 1.0 / np.sqrt(var + eps)  # (...,)
    y = xc * rstd[..., None] * np.asarray(gamma, np.float64) + np.asarray(beta, np.float64)
    stats = _stats_dtype(x.dtype)
    return from_float64(y, x.dtype), mean.astype(stats), rstd.astype(stats)
