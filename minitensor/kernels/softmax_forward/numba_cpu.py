"""Softmax forward on the CPU with Numba (§3.2.1 Eq. (1), masking §3.2.3); spec: reference.py.

v1: naive port of the reference, one row per prange iteration, float64 sums, exp computed twice
v2: one exp per entry kept in the output then scaled by 1/sum, math in the input dtype, safe fastmath
v3: branch-free row loops and a polynomial float32 exp (numba_math.exp_like) so LLVM vectorises them
v4: TILE rows at a time, copied transposed into an (L, TILE) buffer so every loop runs across rows:
    attention rows are short (L = 16 in the Multi30k preset), too short for v3's row loops to
    reach their vector body, and a max over one row never vectorises

Shapes: L = keys per row. The wrapper views x as (A, B, C, L) rows and passes the mask
un-broadcast as a small C-contiguous (Am, Bm, C_m, L) array, each of Am, Bm, C_m either 1 or
equal to A, B, C; row (a, b, c) reads mask row (a % Am, b % Bm, c % C_m). So a (B, 1, 1, L)
padding mask is never copied out to (B, H, T, L), and its rows stay contiguous, which LLVM
needs to vectorise (a zero-stride broadcast view made v3 twice as slow, measured).
Fastmath leaves out nnan/ninf because blocked entries are -inf. Rows with a NaN, a +inf max or
nothing above -inf follow the reference's rule one entry at a time (_special_row).
"""
import numpy as np
from numba import njit, prange

from minitensor.kernels.numba_math import exp_like

FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}  # no nnan/ninf: -inf is meaningful


@njit(cache=True)
def _special_row(xr, mr, scale, row_max, nans, yr):
    """A row with a NaN (all NaN), nothing above -inf (zeros) or a +inf max (equal shares of the +inf entries)."""
    if nans:
        yr[:] = np.nan
        return
    count = 0
    for j in range(xr.size):
        if row_max == np.inf and not mr[j] and scale * xr[j] == np.inf:
            count += 1
    for j in range(xr.size):
        yr[j] = 1.0 / count if count > 0 and not mr[j] and scale * xr[j] == np.inf else 0.0


@njit(cache=True, parallel=True)
def softmax_forward_v1(x4, scale, mask4, y4):
    A, B, C, L = x4.shape
    Am, Bm, Cm = mask4.shape[0], mask4.shape[1], mask4.shape[2]
    for r in prange(A * B * C):
        a, b, c = r // (B * C), (r // C) % B, r % C
        xr, mr, yr = x4[a, b, c], mask4[a % Am, b % Bm, c % Cm], y4[a, b, c]
        row_max = -np.inf
        nans = 0
        for j in range(L):
            if not mr[j]:
                v = scale * np.float64(xr[j])
                row_max = v if v > row_max else row_max  # NaN never wins: counted below
                nans += v != v
        if nans or not (row_max < np.inf and row_max > -np.inf):
            _special_row(xr, mr, scale, row_max, nans, yr)
            continue
        total = 0.0
        for j in range(L):
            if not mr[j]:
                total += np.exp(scale * np.float64(xr[j]) - row_max)
        for j in range(L):
            if mr[j]:  # blocked entry -> 0
                yr[j] = 0.0
            else:
                yr[j] = np.exp(scale * np.float64(xr[j]) - row_max) / total


@njit(cache=True, parallel=True, fastmath=FASTMATH)
def softmax_forward_v2(x4, scale, mask4, y4):
    A, B, C, L = x4.shape
    Am, Bm, Cm = mask4.shape[0], mask4.shape[1], mask4.shape[2]
    for r in prange(A * B * C):
        a, b, c = r // (B * C), (r // C) % B, r % C
        xr, mr, yr = x4[a, b, c], mask4[a % Am, b % Bm, c % Cm], y4[a, b, c]
        row_max = -np.inf
        nans = 0
        for j in range(L):
            if not mr[j]:
                v = scale * xr[j]  # scale has x's dtype (wrapper)
                row_max = v if v > row_max else row_max
                nans += v != v
        if nans or not (row_max < np.inf and row_max > -np.inf):
            _special_row(xr, mr, scale, row_max, nans, yr)
            continue
        total = scale * 0  # zero in x's dtype
        for j in range(L):
            e = 0 * scale if mr[j] else np.exp(scale * xr[j] - row_max)
            yr[j] = e  # keep exp once, rescale below
            total += e
        inv = 1 / total
        for j in range(L):
            yr[j] *= inv


@njit(cache=True, parallel=True, fastmath=FASTMATH)
def softmax_forward_v3(x4, scale, mask4, y4):
    A, B, C, L = x4.shape
    Am, Bm, Cm = mask4.shape[0], mask4.shape[1], mask4.shape[2]
    neg_inf = x4.dtype.type(-np.inf)
    for r in prange(A * B * C):
        a, b, c = r // (B * C), (r // C) % B, r % C
        xr, mr, yr = x4[a, b, c], mask4[a % Am, b % Bm, c % Cm], y4[a, b, c]
        row_max = neg_inf
        nans = 0
        for j in range(L):  # selects instead of branches: the loop vectorises
            v = neg_inf if mr[j] else scale * xr[j]
            row_max = v if v > row_max else row_max
            nans += v != v
        if nans or not (row_max < np.inf and row_max > neg_inf):  # rare rows, one entry at a time
            _special_row(xr, mr, scale, row_max, nans, yr)
            continue
        total = 0 * scale
        for j in range(L):
            e = exp_like(scale * xr[j] - row_max, xr)
            e = 0 * scale if mr[j] else e
            yr[j] = e
            total += e
        inv = 1 / total
        for j in range(L):
            yr[j] *= inv


TILE = 64  # rows per tile (v4): a few SIMD vectors across rows (16 and 128 measured slower)


@njit(cache=True, parallel=True, fastmath=FASTMATH)
def softmax_forward_v4(x4, scale, mask4, y4):
    A, B, C, L = x4.shape
    Am, Bm, Cm = mask4.shape[0], mask4.shape[1], mask4.shape[2]
    rows = A * B * C
    x2, y2 = x4.reshape(rows, L), y4.reshape(rows, L)  # (rows, L)
    typ = x4.dtype.type
    neg_inf = typ(-np.inf)
    for tile in prange((rows + TILE - 1) // TILE):
        first = tile * TILE
        count = min(TILE, rows - first)
        z = np.zeros((L, TILE), x4.dtype)  # (L, TILE): z[j, k] = scale * x[row first + k, j], -inf if blocked
        a, b, c = first // (B * C), (first // C) % B, first % C  # row first's (a, b, c), then counted up
        for k in range(count):
            xr, mr = x2[first + k], mask4[a % Am, b % Bm, c % Cm]
            for j in range(L):
                z[j, k] = neg_inf if mr[j] else scale * xr[j]
            c += 1
            if c == C:
                c, b = 0, b + 1
                if b == B:
                    b, a = 0, a + 1
        top = np.full(TILE, neg_inf)
        nans = np.zeros(TILE, np.int64)
        for j in range(L):
            for k in range(TILE):
                v = z[j, k]
                top[k] = v if v > top[k] else top[k]
                nans[k] += v != v
        special = np.zeros(TILE, np.bool_)
        for k in range(TILE):  # rare rows (NaN, +inf max, all blocked): redone one entry at a time below
            special[k] = nans[k] > 0 or not (top[k] < np.inf and top[k] > neg_inf)
            top[k] = typ(0.0) if special[k] else top[k]
        total = np.zeros(TILE, x4.dtype)
        for j in range(L):
            for k in range(TILE):
                v = z[j, k]
                e = exp_like(v - top[k], z)
                e = typ(0.0) if v == neg_inf else e  # blocked: exactly 0 (exp_like stops at exp(-87))
                z[j, k] = e
                total[k] += e
        for k in range(count):
            yr = y2[first + k]
            if special[k]:
                r = first + k
                a, b, c = r // (B * C), (r // C) % B, r % C
                xr, mr = x2[r], mask4[a % Am, b % Bm, c % Cm]
                row_max = neg_inf
                for j in range(L):
                    v = neg_inf if mr[j] else scale * xr[j]
                    row_max = v if v > row_max else row_max
                _special_row(xr, mr, scale, row_max, nans[k], yr)
            else:
                inv = 1 / total[k]
                for j in range(L):
                    yr[j] = z[j, k] * inv


VERSIONS = {1: softmax_forward_v1, 2: softmax_forward_v2, 3: softmax_forward_v3, 4: softmax_forward_v4}
DEFAULT = 4


def _as_4d_shape(shape):
    """(..., L) -> (A, B, C, L): prepend ones, or merge extra leading axes into A."""
    if len(shape) <= 4:
        return (1,) * (4 - len(shape)) + tuple(shape)
    return (int(np.prod(shape[:-3])),) + tuple(shape[-3:])


def _compact_mask(mask, x_shape, shape4):
    """The mask as a C-contiguous (Am, Bm, C_m, L) bool array, broadcast only where it must be."""
    L = x_shape[-1]
    if mask is None:
        return np.zeros((1, 1, 1, L), dtype=np.bool_)
    m = np.asarray(mask, dtype=np.bool_)
    m = m.reshape((1,) * (len(x_shape) - m.ndim) + m.shape)  # same ndim as x
    m = np.broadcast_to(m, m.shape[:-1] + (L,))  # a (..., 1) mask gets its L entries
    if len(x_shape) > 4:  # rare: merging leading axes needs the full broadcast
        m = np.broadcast_to(m, x_shape).reshape(shape4)
    return np.ascontiguousarray(m.reshape((1,) * (4 - m.ndim) + m.shape))


def softmax_forward(x, scale, mask):
    """y = softmax(scale * x) over the last axis, mask True = blocked (None: nothing blocked)."""
    shape4 = _as_4d_shape(x.shape)
    x4 = np.ascontiguousarray(x).reshape(shape4)  # (A, B, C, L)
    mask4 = _compact_mask(mask, x.shape, shape4)  # (Am, Bm, C_m, L), each 1 or full
    y4 = np.empty_like(x4)
    VERSIONS[DEFAULT](x4, x.dtype.type(scale), mask4, y4)
    return y4.reshape(x.shape)
