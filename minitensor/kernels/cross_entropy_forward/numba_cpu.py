"""Label-smoothed cross-entropy forward + dlogits on the CPU with Numba; spec: reference.py.

v1: naive port of the reference, one row per prange iteration, float64 sums, exp computed twice
v2: exp in the logits' dtype kept in dlogits during the sum pass, then one scale-and-subtract pass, fastmath
v3: row body in its own function plus a polynomial float32 exp (numba_math.exp_like): the row loops vectorise
v4: the row max in vectorised lanes (numba_math.row_max; the scalar max loop was half of v3's time) and
    sums in the logits' dtype (float64 sums of float32 values halved the exp pass's SIMD width)

Per row, never building q: with lse = max + log(sum exp(x - max)) and c = smoothing_mass(),
loss = (1 - smoothing)(lse - x_t) + c * sum_{j != t, ignore_index} (lse - x_j), where the sum uses
the running sum of the row's logits; dlogits = p - c everywhere, then p - (1 - smoothing) at t and
p at ignore_index. Shapes: N = rows, V = classes.
"""
import numpy as np
from numba import njit, prange

from minitensor.kernels.numba_math import exp_like, row_max

from .reference import check_targets, smoothing_mass

FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}


@njit(cache=True, parallel=True)
def cross_entropy_forward_v1(logits, targets, gold_q, other_q, ignore_index, loss, nll, dlogits):
    N, V = logits.shape
    for i in prange(N):
        t = targets[i]
        if t == ignore_index:  # ignore_index = -1 when no class is ignored
            loss[i] = 0.0
            nll[i] = 0.0
            for j in range(V):
                dlogits[i, j] = 0.0
        else:
            row_max = -np.inf
            for j in range(V):
                row_max = max(row_max, np.float64(logits[i, j]))
            total = 0.0
            logit_sum = 0.0
            for j in range(V):
                total += np.exp(logits[i, j] - row_max)
                logit_sum += logits[i, j]
            lse = row_max + np.log(total)  # log sum_j exp(x_j)
            others = V * lse - logit_sum - (lse - logits[i, t])  # sum over j != t of (lse - x_j)
            if ignore_index >= 0:
                others -= lse - logits[i, ignore_index]
            nll[i] = lse - logits[i, t]
            loss[i] = gold_q * nll[i] + other_q * others
            for j in range(V):
                dlogits[i, j] = np.exp(logits[i, j] - row_max) / total - other_q
            dlogits[i, t] = np.exp(logits[i, t] - row_max) / total - gold_q
            if ignore_index >= 0:
                dlogits[i, ignore_index] = np.exp(logits[i, ignore_index] - row_max) / total


@njit(cache=True, parallel=True, fastmath=FASTMATH)
def cross_entropy_forward_v2(logits, targets, gold_q, other_q, ignore_index, loss, nll, dlogits):
    N, V = logits.shape
    typ = logits.dtype.type
    for i in prange(N):
        t = targets[i]
        row, out = logits[i], dlogits[i]
        if t == ignore_index:
            loss[i] = 0.0
            nll[i] = 0.0
            out[:] = 0.0
        else:
            row_max = row[0]
            for j in range(1, V):
                row_max = max(row_max, row[j])
            total = 0.0
            logit_sum = 0.0
            for j in range(V):
                e = np.exp(row[j] - row_max)  # exp in the logits' dtype (expf for float32)
                out[j] = e
                total += e
                logit_sum += row[j]
            lse = row_max + np.log(total)
            others = V * lse - logit_sum - (lse - row[t])
            if ignore_index >= 0:
                others -= lse - row[ignore_index]
            nll[i] = lse - row[t]
            loss[i] = gold_q * nll[i] + other_q * others
            inv, c = typ(1.0 / total), typ(other_q)
            for j in range(V):
                out[j] = out[j] * inv - c
            out[t] += c - typ(gold_q)  # target: p - (1 - smoothing)
            if ignore_index >= 0:
                out[ignore_index] += c  # ignored class: q = 0, so p - 0


@njit(cache=True, fastmath=FASTMATH)
def _smoothed_row(row, out, t, gold_q, other_q, ignore_index):
    """One row of v3 whose target is not ignored: writes p - q into out, returns (loss, nll)."""
    V = row.size
    row_max = row[0]
    for j in range(1, V):
        row_max = max(row_max, row[j])
    total = 0.0
    logit_sum = 0.0
    for j in range(V):
        e = exp_like(row[j] - row_max, row)  # vectorisable float32 exp, np.exp for float64
        out[j] = e
        total += e
        logit_sum += row[j]
    lse = row_max + np.log(total)
    others = V * lse - logit_sum - (lse - row[t])  # sum over j != t of -log p_j
    if ignore_index >= 0:
        others -= lse - row[ignore_index]
    nll = lse - row[t]
    inv, c = row.dtype.type(1.0 / total), row.dtype.type(other_q)
    for j in range(V):
        out[j] = out[j] * inv - c
    out[t] += c - row.dtype.type(gold_q)  # target: p - (1 - smoothing)
    if ignore_index >= 0:
        out[ignore_index] += c  # ignored class: q = 0, so p - 0
    return gold_q * nll + other_q * others, nll


@njit(cache=True, parallel=True, fastmath=FASTMATH)
def cross_entropy_forward_v3(logits, targets, gold_q, other_q, ignore_index, loss, nll, dlogits):
    N, V = logits.shape
    for i in prange(N):
        t = targets[i]
        if t == ignore_index:
            loss[i] = 0.0
            nll[i] = 0.0
            dlogits[i, :] = 0.0
        else:  # a call keeps the row loops out of this branch, which blocked vectorising (measured)
            loss[i], nll[i] = _smoothed_row(logits[i], dlogits[i], t, gold_q, other_q, ignore_index)


@njit(cache=True, fastmath=FASTMATH)
def _smoothed_row_v4(row, out, t, gold_q, other_q, ignore_index):
    """One row of v4 whose target is not ignored: writes p - q into out, returns (loss, nll)."""
    V = row.size
    typ = row.dtype.type
    top = row_max(row)
    total = typ(0.0)  # float32 sums for float32 rows: reassoc spreads them over many SIMD partial sums
    logit_sum = typ(0.0)
    for j in range(V):
        e = exp_like(row[j] - top, row)
        out[j] = e
        total += e
        logit_sum += row[j]
    lse = top + np.log(np.float64(total))
    others = V * lse - np.float64(logit_sum) - (lse - row[t])  # sum over j != t of -log p_j
    if ignore_index >= 0:
        others -= lse - row[ignore_index]
    nll = lse - row[t]
    inv, c = typ(1.0 / total), typ(other_q)
    for j in range(V):
        out[j] = out[j] * inv - c
    out[t] += c - typ(gold_q)  # target: p - (1 - smoothing)
    if ignore_index >= 0:
        out[ignore_index] += c  # ignored class: q = 0, so p - 0
    return gold_q * nll + other_q * others, nll


@njit(cache=True, parallel=True, fastmath=FASTMATH)
def cross_entropy_forward_v4(logits, targets, gold_q, other_q, ignore_index, loss, nll, dlogits):
    N, V = logits.shape
    for i in prange(N):
        t = targets[i]
        if t == ignore_index:
            loss[i] = 0.0
            nll[i] = 0.0
            dlogits[i, :] = 0.0
        else:
            loss[i], nll[i] = _smoothed_row_v4(logits[i], dlogits[i], t, gold_q, other_q, ignore_index)


VERSIONS = {1: cross_entropy_forward_v1, 2: cross_entropy_forward_v2, 3: cross_entropy_forward_v3,
            4: cross_entropy_forward_v4}
DEFAULT = 4


def cross_entropy_forward(logits, targets, smoothing, ignore_index):
    """Returns (loss, nll, dlogits): per-row smoothed loss and NLL (float32/float64), dlogits = p - q."""
    logits2 = np.ascontiguousarray(logits)  # (N, V)
    N, V = logits2.shape
    other_q = smoothing_mass(smoothing, V, ignore_index)
    stats = np.float64 if logits2.dtype == np.float64 else np.float32
    loss = np.empty(N, dtype=stats)
    nll = np.empty(N, dtype=stats)
    dlogits = np.empty_like(logits2)
    targets1 = np.ascontiguousarray(targets, dtype=np.int64).reshape(-1)  # (N,)
    check_targets(targets1, V, ignore_index)
    ignore = -1 if ignore_index is None else int(ignore_index)  # no real target is negative
    VERSIONS[DEFAULT](logits2, targets1, 1.0 - smoothing, other_q, ignore, loss, nll, dlogits)
    return loss, nll, dlogits
