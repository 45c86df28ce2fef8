"""The post-norm sub-layer connection's backward on the CPU with Numba (§3.1, §5.4); spec: reference.py.

v1: rows split into one chunk per thread; each row's dz (term by term, as layernorm_backward), ds
    (the same dropout mask) and its own chunk's partial column sums (dgamma, dbeta, dbias), then
    the partials summed in order
v2: the element math in z's dtype with fastmath (float32 vectorises 16 wide, float64 stays exact), g and
    x̂ kept in a row buffer for the second pass, the column sums in a per-chunk row buffer in z's dtype
    flushed to the float64 partials every FLUSH_ROWS rows (v1 updated the (P, 3, D) float64 partials in
    the inner loop, which kept it scalar): 2-3x faster on one thread

Shapes: N = rows (every leading axis merged), D = d_model, P = chunks (threads). u: the draws' rows where
they lie, row logical_row(i, positions, batch) for z's row i (numba_draws.py: time-major draws are not copied).
"""
import numpy as np
from numba import get_num_threads, njit, prange

from ..numba_draws import draw_rows, logical_row


@njit(inline="always")
def sum_chunks(partial, sums):
    """sums[k, j] = Σ_c partial[c, k, j], the chunks in order (the same sums every call for a number of chunks)."""
    for k in range(partial.shape[1]):
        for j in range(partial.shape[2]):
            total = 0.0
            for c in range(partial.shape[0]):
                total += partial[c, k, j]
            sums[k, j] = total


@njit(cache=True, parallel=True)
def dropout_add_layernorm_backward_v1(dy, dy2, two, z, u, positions, batch, p, gamma, mean, rstd, num_chunks, dx, ds,
                                      sums):
    N, D = z.shape
    keep_scale = 1.0 / (1.0 - p)
    partial = np.zeros((num_chunks, 3, D))  # (P, 3, D) float64: dgamma, dbeta, dbias
    rows_per_chunk = (N + num_chunks - 1) // num_chunks
    for c in prange(num_chunks):
        for i in range(c * rows_per_chunk, min(N, (c + 1) * rows_per_chunk)):
            g_sum = 0.0
            gx_sum = 0.0
            for j in range(D):
                d = np.float64(dy[i, j]) + (np.float64(dy2[i, j]) if two else 0.0)
                xhat = (np.float64(z[i, j]) - mean[i]) * rstd[i]
                g = d * gamma[j]
                g_sum += g
                gx_sum += g * xhat
                partial[c, 0, j] += d * xhat
                partial[c, 1, j] += d
            g_mean, gx_mean = g_sum / D, gx_sum / D
            ui = logical_row(i, positions, batch)
            for j in range(D):
                d = np.float64(dy[i, j]) + (np.float64(dy2[i, j]) if two else 0.0)
                xhat = (np.float64(z[i, j]) - mean[i]) * rstd[i]
                # term 1: g; term 2: -mean(g) via the mean; term 3: -xhat*mean(g*xhat) via rstd
                rounded = dx.dtype.type(rstd[i] * (d * gamma[j] - g_mean - xhat * gx_mean))
                dx[i, j] = rounded
                dsv = np.float64(rounded)  # the mask on the rounded dz; ds is dx without one (never read back)
                if p > 0.0:
                    rounded = ds.dtype.type(dsv * keep_scale if u[ui, j] >= p else 0.0)
                    ds[i, j] = rounded
                    dsv = np.float64(rounded)
                partial[c, 2, j] += dsv
    sum_chunks(partial, sums)


FLUSH_ROWS = 16  # rows summed in z's dtype before they join the float64 partials (blocked summation)


@njit(cache=True, parallel=True, fastmath={"nsz", "arcp", "contract", "afn", "reassoc"})
def dropout_add_layernorm_backward_v2(dy, dy2, two, z, u, positions, batch, p, gamma, mean, rstd, num_chunks, dx, ds,
                                      sums):
    N, D = z.shape
    t = z.dtype.type
    keep_scale, zero, p_u = t(1.0 / (1.0 - p)), t(0.0), u.dtype.type(p)
    partial = np.zeros((num_chunks, 3, D))  # (P, 3, D) float64: dgamma, dbeta, dbias
    rows_per_chunk = (N + num_chunks - 1) // num_chunks
    for c in prange(num_chunks):
        local = np.zeros((3, D), dtype=z.dtype)  # this chunk's last rows' column sums, in z's dtype
        g = np.empty(D, dtype=z.dtype)
        xhat = np.empty(D, dtype=z.dtype)
        first, last = c * rows_per_chunk, min(N, (c + 1) * rows_per_chunk)
        for i in range(first, last):
            mu, rs = t(mean[i]), t(rstd[i])
            g_sum = t(0.0)
            gx_sum = t(0.0)
            for j in range(D):
                d = dy[i, j] + dy2[i, j] if two else dy[i, j]
                xh = (z[i, j] - mu) * rs
                gj = d * gamma[j]
                g[j] = gj
                xhat[j] = xh
                g_sum += gj
                gx_sum += gj * xh
                local[0, j] += d * xh
                local[1, j] += d
            g_mean, gx_mean = g_sum / t(D), gx_sum / t(D)
            ui = logical_row(i, positions, batch)
            if p > 0.0:
                for j in range(D):
                    v = rs * (g[j] - g_mean - xhat[j] * gx_mean)
                    dx[i, j] = v
                    dsv = v * keep_scale if u[ui, j] >= p_u else zero
                    ds[i, j] = dsv
                    local[2, j] += dsv
            else:
                for j in range(D):
                    v = rs * (g[j] - g_mean - xhat[j] * gx_mean)
                    dx[i, j] = v
                    local[2, j] += v
            if (i - first) % FLUSH_ROWS == FLUSH_ROWS - 1 or i == last - 1:
                for k in range(3):
                    for j in range(D):
                        partial[c, k, j] += local[k, j]
                        local[k, j] = zero
    sum_chunks(partial, sums)


VERSIONS = {1: dropout_add_layernorm_backward_v1, 2: dropout_add_layernorm_backward_v2}
DEFAULT = 2


def dropout_add_layernorm_backward(dys, z, u, p, gamma, mean, rstd, with_bias):
    """(dx, ds, dgamma, dbeta, dbias) of z = x + Dropout(s + bias), y = LayerNorm(z); dys: 1 or 2 gradients of y
    (Backend.at_most_two adds more first)."""
    if len(dys) not in (1, 2):
        raise ValueError(f"dropout_add_layernorm_backward: one or two gradients, got {len(dys)}")
    D = z.shape[-1]
    z2 = np.ascontiguousarray(z).reshape(-1, D)  # (N, D)
    dy, dy2 = (np.ascontiguousarray(d, dtype=z.dtype).reshape(-1, D) for d in (dys[0], dys[-1]))
    u2, positions, batch = (z2, 0, 0) if p == 0.0 else draw_rows(u, D)
    dx = np.empty_like(z2)
    ds = dx if p == 0.0 else np.empty_like(z2)  # without dropout ds is dx
    sums = np.empty((3, D))
    num_chunks = max(1, min(z2.shape[0], 4 * get_num_threads()))
    VERSIONS[DEFAULT](dy, dy2, len(dys) == 2, z2, u2, positions, batch, float(p),
                      np.ascontiguousarray(gamma, dtype=z.dtype),
                      np.ascontiguousarray(mean, dtype=np.float64).reshape(-1),
                      np.ascontiguousarray(rstd, dtype=np.float64).reshape(-1), num_chunks, dx, ds, sums)
    dgamma, dbeta, dbias = (sums[k].astype(gamma.dtype) for k in range(3))
    dx = dx.reshape(z.shape)
    return dx, dx if p == 0.0 else ds.reshape(z.shape), dgamma, dbeta, dbias if with_bias else None
