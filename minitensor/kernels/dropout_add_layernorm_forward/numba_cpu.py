"""The post-norm sub-layer connection's forward on the CPU with Numba (§3.1, §5.4); spec: reference.py.

v1: naive port of the reference: one row per prange iteration, z written, then two-pass float64 mean
    and variance over the written z, then y
v2: the same passes with fastmath and the elementwise work in x's dtype (float64 row sums), so they vectorise
v3: v2 with the row sums in x's dtype too (float32 sums 16 wide, blocked by the vector lanes; float64 stays
    exact) instead of converting every element to float64, and the dropout test hoisted out of the loop:
    ~1.4x in cache; at the training size (2048, 128) both are bound by memory bandwidth (~1.1x)

Shapes: N = rows (every leading axis merged), D = d_model. u: the draws' rows where they lie, row
logical_row(i, positions, batch) for x's row i (numba_draws.py: time-major draws are not copied).
"""
import numpy as np
from numba import njit, prange

from ..numba_draws import draw_rows, logical_row


@njit(cache=True, parallel=True)
def dropout_add_layernorm_forward_v1(x, s, u, positions, batch, p, bias, has_bias, gamma, beta, eps, y, z, mean,
                                     rstd):
    N, D = x.shape
    keep_scale = 1.0 / (1.0 - p)
    for i in prange(N):
        ui = logical_row(i, positions, batch)
        for j in range(D):
            d = np.float64(s[i, j]) + (np.float64(bias[j]) if has_bias else 0.0)
            if p > 0.0:
                d = d * keep_scale if u[ui, j] >= p else 0.0
            z[i, j] = np.float64(x[i, j]) + d
        total = 0.0
        for j in range(D):
            total += np.float64(z[i, j])
        mu = total / D
        sq = 0.0
        for j in range(D):
            c = np.float64(z[i, j]) - mu
            sq += c * c
        rs = 1.0 / np.sqrt(sq / D + eps)  # biased variance
        for j in range(D):
            y[i, j] = (np.float64(z[i, j]) - mu) * rs * gamma[j] + beta[j]
        mean[i] = mu
        rstd[i] = rs


@njit(cache=True, parallel=True, fastmath={"nsz", "arcp", "contract", "afn", "reassoc"})
def dropout_add_layernorm_forward_v2(x, s, u, positions, batch, p, bias, has_bias, gamma, beta, eps, y, z, mean,
                                     rstd):
    N, D = x.shape
    t = x.dtype.type
    keep_scale, zero, p_u = t(1.0 / (1.0 - p)), t(0.0), u.dtype.type(p)
    for i in prange(N):
        ui = logical_row(i, positions, batch)
        total = 0.0
        for j in range(D):
            d = s[i, j] + bias[j] if has_bias else s[i, j]
            if p > 0.0:
                d = d * keep_scale if u[ui, j] >= p_u else zero
            v = x[i, j] + d
            z[i, j] = v
            total += v
        mu = total / D
        sq = 0.0
        for j in range(D):
            c = z[i, j] - mu
            sq += c * c
        rs = 1.0 / np.sqrt(sq / D + eps)
        mu_t, rs_t = t(mu), t(rs)
        for j in range(D):
            y[i, j] = (z[i, j] - mu_t) * rs_t * gamma[j] + beta[j]
        mean[i] = mu
        rstd[i] = rs


@njit(cache=True, parallel=True, fastmath={"nsz", "arcp", "contract", "afn", "reassoc"})
def dropout_add_layernorm_forward_v3(x, s, u, positions, batch, p, bias, has_bias, gamma, beta, eps, y, z, mean,
                                     rstd):
    N, D = x.shape
    t = x.dtype.type
    keep_scale, zero, p_u = t(1.0 / (1.0 - p)), t(0.0), u.dtype.type(p)
    for i in prange(N):
        ui = logical_row(i, positions, batch)
        total = zero
        if p > 0.0:
            for j in range(D):
                d = s[i, j] + bias[j] if has_bias else s[i, j]
                v = x[i, j] + (d * keep_scale if u[ui, j] >= p_u else zero)
                z[i, j] = v
                total += v
        else:
            for j in range(D):
                v = x[i, j] + (s[i, j] + bias[j] if has_bias else s[i, j])
                z[i, j] = v
                total += v
        mu = total / t(D)
        sq = zero
        for j in range(D):
            c = z[i, j] - mu
            sq += c * c
        rs = t(1.0) / np.sqrt(sq / t(D) + t(eps))
        for j in range(D):
            y[i, j] = (z[i, j] - mu) * rs * gamma[j] + beta[j]
        mean[i] = mu
        rstd[i] = rs


VERSIONS = {1: dropout_add_layernorm_forward_v1, 2: dropout_add_layernorm_forward_v2, 3: dropout_add_layernorm_forward_v3}
DEFAULT = 3


def dropout_add_layernorm_forward(x, s, u, p, bias, gamma, beta, eps):
    """(y, z, mean, rstd): z = x + Dropout(s + bias) (u: draws of x's shape, None when p = 0), y = LayerNorm(z)."""
    D = x.shape[-1]
    x2 = np.ascontiguousarray(x).reshape(-1, D)  # (N, D)
    s2 = np.ascontiguousarray(s, dtype=x.dtype).reshape(-1, D)
    u2, positions, batch = (x2, 0, 0) if p == 0.0 else draw_rows(u, D)  # unread without dropout
    b = np.zeros(D, x.dtype) if bias is None else np.ascontiguousarray(bias, dtype=x.dtype)
    stats = np.float64 if x.dtype == np.float64 else np.float32
    y2, z2 = np.empty_like(x2), np.empty_like(x2)
    mean, rstd = np.empty(x2.shape[0], dtype=stats), np.empty(x2.shape[0], dtype=stats)
    VERSIONS[DEFAULT](x2, s2, u2, positions, batch, float(p), b, bias is not None,
                      np.ascontiguousarray(gamma, dtype=x.dtype), np.ascontiguousarray(beta, dtype=x.dtype), float(eps),
                      y2, z2, mean, rstd)
    return y2.reshape(x.shape), z2.reshape(x.shape), mean.reshape(x.shape[:-1]), rstd.reshape(x.shape[:-1])
