"""LayerNorm forward on the CPU with Numba (§3.1); spec: reference.py.

v1: naive port of the reference, one row per prange iteration, two-pass float64 mean and variance
v2: same two passes with fastmath so the reassociated row sums vectorise, y written in one fused loop

Shapes: N = rows (every leading axis merged), D = d_model.
"""
import numpy as np
from numba import njit, prange

FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}


@njit(cache=True, parallel=True)
def layernorm_forward_v1(x, gamma, beta, eps, y, mean, rstd):
    N, D = x.shape
    for i in prange(N):
        total = 0.0
        for j in range(D):
            total += x[i, j]
        mu = total / D
        sq = 0.0
        for j in range(D):
            sq += (x[i, j] - mu) ** 2
        rs = 1.0 / np.sqrt(sq / D + eps)  # biased variance
        for j in range(D):
            y[i, j] = (x[i, j] - mu) * rs * gamma[j] + beta[j]
        mean[i] = mu
        rstd[i] = rs


@njit(cache=True, parallel=True, fastmath=FASTMATH)
def layernorm_forward_v2(x, gamma, beta, eps, y, mean, rstd):
    N, D = x.shape
    for i in prange(N):
        total = 0.0  # float64 accumulators: still vectorised (convert + add)
        for j in range(D):
            total += x[i, j]
        mu = total / D
        sq = 0.0
        for j in range(D):
            d = x[i, j] - mu
            sq += d * d
        rs = 1.0 / np.sqrt(sq / D + eps)
        mu_t, rs_t = x.dtype.type(mu), x.dtype.type(rs)  # row constants in x's dtype
        for j in range(D):
            y[i, j] = (x[i, j] - mu_t) * rs_t * gamma[j] + beta[j]
        mean[i] = mu
        rstd[i] = rs


VERSIONS = {1: layernorm_forward_v1, 2: layernorm_forward_v2}
DEFAULT = 2


def layernorm_forward(x, gamma, beta, eps):
    """Returns (y, mean, rstd): y like x, mean/rstd of shape x.shape[:-1] (float32 or float64)."""
    D = x.shape[-1]
    x2 = np.ascontiguousarray(x).reshape(-1, D)  # (N, D)
    stats = np.float64 if x.dtype == np.float64 else np.float32
    y2 = np.empty_like(x2)
    mean = np.empty(x2.shape[0], dtype=stats)  # (N,)
    rstd = np.empty(x2.shape[0], dtype=stats)  # (N,)
    g = np.ascontiguousarray(gamma, dtype=x.dtype)
    b = np.ascontiguousarray(beta, dtype=x.dtype)
    VERSIONS[DEFAULT](x2, g, b, float(eps), y2, mean, rstd)
    return y2.reshape(x.shape), mean.reshape(x.shape[:-1]), rstd.reshape(x.shape[:-1])
