"""The three CPU kernels of fast decoding (transformer/fast_search.py), each beside its NumPy reference.

Shapes: n rows being decoded (B·k), P positions decoded so far, B sentences, S source length,
D = d_model, H heads, K = D/H, R rows of a key/value arena, V vocab, W = width (candidates a row).

self_attention_step  §3.2.1 Eq. (1) for one new query per row over its P cached keys/values.
    The cache is an arena that only grows: step p writes its n rows once, and `rows[i, p]`
    names the arena row that holds position p of row i's hypothesis. Beam search moves a
    hypothesis by copying its (P,) row of indices, never its keys and values.
cross_attention_step §3.2.3 encoder-decoder attention: row i reads its sentence's (S, D)
    keys/values (`sentence[i]`), shared by the sentence's k beams instead of tiled k times.
log_softmax_topk     the log-softmax over the vocabulary and the W best tokens of each row in
    one kernel: two passes over a row's logits instead of NumPy's eight over all of them.
    Padding and BOS count in the normaliser but are never chosen, as in transformer/search.py.
add_layernorm        §3.1 LayerNorm(x + Sublayer(x)) in one pass over the rows (post-norm's residual);
layernorm            the same without the residual (pre-norm's LayerNorm(x));
bias_relu            §3.3's max(0, xW_1 + b_1) after the product, in place.

Each kernel that reads a product adds that product's bias itself (the Q, K, V biases in the
attention kernels, the last bias of a sublayer in add_layernorm): the fewer calls a step makes,
the less its threads wait for each other at Python's lock (GIL) between them.

version 1 of each (the only one): the rows one after another in the calling thread, with the
GIL released, fastmath loops in the input's dtype that LLVM vectorises (all heads of a key row
at once, rows read where they lie). Decoding is parallel over batches instead
(train/evaluate/translate.py: one decoder per thread), not inside each kernel: threads that
meet at the end of every kernel wait for the slowest, and on a busy machine that is the one
another program holds (train/threads.py).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from minitensor.kernels.numba_math import exp_like

FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}


# --- references (NumPy, float64 accumulation) ------------------------------------------------
def _attention_ref(q, keys, values, heads, valid=None):
    """q (n, D) over each row's own keys/values (n, L, D) -> (n, D); where valid (n, L) is False: weight 0."""
    n, D = q.shape
    K = D // heads
    qh = q.astype(np.float64).reshape(n, heads, 1, K)                     # (n, H, 1, K)
    kh = keys.astype(np.float64).reshape(n, -1, heads, K).transpose(0, 2, 3, 1)   # (n, H, K, L)
    vh = values.astype(np.float64).reshape(n, -1, heads, K).transpose(0, 2, 1, 3)  # (n, H, L, K)
    scores = (qh @ kh) / math.sqrt(K)                                    # (n, H, 1, L)
    if valid is not None:
        scores = np.where(valid[:, None, None, :], scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return (weights @ vh).reshape(n, D).astype(q.dtype)                  # (n, H, 1, K) -> (n, D)


def self_attention_step_ref(qkv, bias, keys, values, first, rows, heads):
    """qkv (n, 3D) = y [W_Q W_K W_V], bias (3D,): writes row i's key and value into arena row first + i of
    keys/values (R, D), then -> (n, D): softmax(q·k_p / √K) v_p over the positions p < P of rows (n, P)."""
    n, D = qkv.shape[0], qkv.shape[1] // 3
    q, k, v = (qkv[:, j * D:(j + 1) * D] + bias[j * D:(j + 1) * D] for j in range(3))
    keys[first:first + n], values[first:first + n] = k, v
    return _attention_ref(q, keys[rows], values[rows], heads)


def cross_attention_step_ref(q, bias, keys, values, sentence, valid, heads):
    """q + bias (n, D) over keys/values (B, S, D) of each row's sentence (n,), where valid (B, S) -> (n, D)."""
    return _attention_ref(q + bias, keys[sentence], values[sentence], heads, valid[sentence])


def add_layernorm_ref(x, y, bias, gamma, beta, eps):
    """LayerNorm(x + y + bias) over the last axis, biased variance, float64 statistics."""
    z = x.astype(np.float64) + y + bias
    mean = z.mean(-1, keepdims=True)
    return ((z - mean) / np.sqrt(((z - mean) ** 2).mean(-1, keepdims=True) + eps) * gamma + beta).astype(x.dtype)


def layernorm_ref(x, gamma, beta, eps):
    """LayerNorm(x) over the last axis, biased variance, float64 statistics."""
    return add_layernorm_ref(x, np.zeros_like(x), 0.0, gamma, beta, eps)


def bias_relu_ref(h, bias):
    """max(h + bias, 0): §3.3's first layer after its product."""
    return np.maximum(h + bias, 0).astype(h.dtype)


def log_softmax_topk_ref(logits, width, banned):
    """(values (n, W) log-probs, best first, in logits' dtype; ids (n, W)); banned ids never chosen."""
    z = logits.astype(np.float64)
    logp = (z - (z.max(-1, keepdims=True) + np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True))))
    logp = logp.astype(logits.dtype)
    logp[:, list(banned)] = -np.inf
    ids = np.argsort(-logp, axis=1, kind="stable")[:, :width]             # ties: the lower id first
    return np.take_along_axis(logp, ids, axis=1), ids


# --- Numba --------------------------------------------------------------------------------------
@njit(inline="always", fastmath=FASTMATH)
def _softmax_rows(scores, length):
    """In place: each row of scores[:, :length] becomes its softmax (an entry of -inf gets weight 0)."""
    for h in range(scores.shape[0]):
        top = scores[h, 0]
        for p in range(length):
            top = scores[h, p] if scores[h, p] > top else top
        total = 0.0
        for p in range(length):
            e = exp_like(scores[h, p] - top, scores) if scores[h, p] > -np.inf else 0 * top
            scores[h, p] = e
            total += e
        inv = scores.dtype.type(1.0 / total)
        for p in range(length):
            scores[h, p] *= inv


@njit(inline="always", fastmath=FASTMATH)
def _dot_heads(q_row, key, heads, scale, scores, p):
    """scores[h, p] = scale · (q_row · key) over head h's K columns, for every head."""
    K = q_row.shape[0] // heads
    for h in range(heads):
        s = 0 * scale
        for c in range(K):                                             # (range(K): LLVM vectorises it)
            s += q_row[h * K + c] * key[h * K + c]
        scores[h, p] = s * scale


@njit(inline="always", fastmath=FASTMATH)
def _add_weighted(acc, weights, scores, p, value):
    """acc += scores[h, p] · value over head h's columns, for every head (weights: scratch, D)."""
    heads, K = scores.shape[0], acc.shape[0] // scores.shape[0]
    for h in range(heads):
        for c in range(K):
            weights[h * K + c] = scores[h, p]
    for c in range(acc.shape[0]):
        acc[c] += weights[c] * value[c]


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def self_attention_step_v1(qkv, bias, keys, values, first, rows, heads, out):
    n, D = out.shape
    P = rows.shape[1]
    scale = out.dtype.type(1.0 / math.sqrt(D // heads))
    for i in range(n):                                                    # the new keys and values, first
        for c in range(D):
            keys[first + i, c] = qkv[i, D + c] + bias[D + c]
            values[first + i, c] = qkv[i, 2 * D + c] + bias[2 * D + c]
    scores, weights, q = np.empty((heads, P), dtype=out.dtype), np.empty(D, dtype=out.dtype), np.empty(D, out.dtype)
    for i in range(n):
        acc = out[i]
        for c in range(D):
            q[c] = qkv[i, c] + bias[c]
        for p in range(P):
            _dot_heads(q, keys[rows[i, p]], heads, scale, scores, p)       # §3.2.1: q·k / √d_k
        _softmax_rows(scores, P)
        acc[:] = 0
        for p in range(P):
            _add_weighted(acc, weights, scores, p, values[rows[i, p]])     # Σ_p softmax(...)_p v_p


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def bias_relu_v1(h, bias):
    for i in range(h.shape[0]):
        for c in range(h.shape[1]):
            v = h[i, c] + bias[c]
            h[i, c] = v if v > 0 else 0 * v


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def cross_attention_step_v1(q, bias, keys, values, sentence, valid, heads, out):
    n, D = out.shape
    S = keys.shape[1]
    scale = out.dtype.type(1.0 / math.sqrt(D // heads))
    scores, weights, q_row = np.empty((heads, S), dtype=out.dtype), np.empty(D, out.dtype), np.empty(D, out.dtype)
    for i in range(n):
        b = sentence[i]
        acc = out[i]
        for c in range(D):
            q_row[c] = q[i, c] + bias[c]
        length = 0                                                         # past the last real source token
        for j in range(S):
            length = j + 1 if valid[b, j] else length
        for j in range(length):
            _dot_heads(q_row, keys[b, j], heads, scale, scores, j)
            if not valid[b, j]:
                scores[:, j] = -np.inf                                     # padding inside: weight 0
        _softmax_rows(scores, length)
        acc[:] = 0
        for j in range(length):
            _add_weighted(acc, weights, scores, j, values[b, j])


BLOCK = 16  # log_softmax_topk skips a block of logits whose largest cannot enter the best W


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def log_softmax_topk_v1(logits, banned, out_values, out_ids):
    n, V = logits.shape
    W = out_values.shape[1]
    neg_inf = logits.dtype.type(-np.inf)
    for i in range(n):
        row = logits[i]
        top = row[0]
        for j in range(V):                                               # pass 1: max, then Σ exp
            top = row[j] if row[j] > top else top                        # (a select vectorises; max() does not)
        total = 0.0                                                      # float64 sum of (vectorised) exps
        for j in range(V):
            total += exp_like(row[j] - top, row)
        shift = row.dtype.type(top + np.log(total))                      # log Σ exp(z), in z's dtype
        vals, ids = out_values[i], out_ids[i]
        for w in range(W):
            vals[w], ids[w] = neg_inf, 0
        for start in range(0, V, BLOCK):                                 # pass 2: insert into the best W
            stop = min(start + BLOCK, V)
            block_top = row[start]
            for j in range(start, stop):
                block_top = row[j] if row[j] > block_top else block_top
            if block_top - shift <= vals[W - 1]:                         # (rounding keeps the order)
                continue
            for j in range(start, stop):
                v = row[j] - shift
                if v <= vals[W - 1] or banned[j]:                        # ties keep the lower id first
                    continue
                w = W - 1
                while w > 0 and vals[w - 1] < v:
                    vals[w], ids[w] = vals[w - 1], ids[w - 1]
                    w -= 1
                vals[w], ids[w] = v, j


@njit(inline="always", fastmath=FASTMATH)
def _normalize(z, gamma, beta, eps):
    """In place: z (D,) becomes (z - mean) / √(var + eps) · gamma + beta, float64 statistics as minitensor's."""
    D = z.shape[0]
    total = 0.0
    for c in range(D):
        total += z[c]
    mean = total / D
    squares = 0.0
    for c in range(D):
        d = z[c] - mean
        squares += d * d
    mean_t, rstd_t = z.dtype.type(mean), z.dtype.type(1.0 / np.sqrt(squares / D + eps))
    for c in range(D):
        z[c] = (z[c] - mean_t) * rstd_t * gamma[c] + beta[c]


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def add_layernorm_v1(x, y, bias, gamma, beta, eps, out):
    for i in range(x.shape[0]):
        for c in range(x.shape[1]):
            out[i, c] = x[i, c] + y[i, c] + bias[c]
        _normalize(out[i], gamma, beta, eps)


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def layernorm_v1(x, gamma, beta, eps, out):
    for i in range(x.shape[0]):
        for c in range(x.shape[1]):
            out[i, c] = x[i, c]
        _normalize(out[i], gamma, beta, eps)


# --- what fast_search.py calls --------------------------------------------------------------------
# `out`: where the result goes (a fresh array when None); fast_search.py reuses its scratch rows.
def self_attention_step(qkv, bias, keys, values, first, rows, heads, out=None):
    """See self_attention_step_ref: the new keys/values into the arena at rows first.., then attention."""
    out = np.empty((qkv.shape[0], qkv.shape[1] // 3), dtype=qkv.dtype) if out is None else out
    self_attention_step_v1(qkv, bias, keys, values, first, rows, heads, out)
    return out


def cross_attention_step(q, bias, keys, values, sentence, valid, heads, out=None):
    out = np.empty(q.shape, dtype=q.dtype) if out is None else out
    cross_attention_step_v1(q, bias, keys, values, sentence, valid, heads, out)
    return out


def add_layernorm(x, y, bias, gamma, beta, eps, out=None):
    """LayerNorm(x + y + bias) for x, y (n, D), bias (D,); out may be x itself."""
    out = np.empty_like(x) if out is None else out
    add_layernorm_v1(x, y, bias, gamma, beta, eps, out)
    return out


def bias_relu(h, bias):
    """In place: h (n, F) becomes max(h + bias, 0)."""
    bias_relu_v1(h, bias)
    return h


def layernorm(x, gamma, beta, eps, out=None):
    """LayerNorm(x) for x (n, D)."""
    out = np.empty_like(x) if out is None else out
    layernorm_v1(x, gamma, beta, eps, out)
    return out


def log_softmax_topk(logits, width, banned):
    """logits (n, V) -> (values (n, W), ids (n, W)); banned: (V,) bool."""
    values = np.empty((logits.shape[0], width), dtype=logits.dtype)
    ids = np.empty((logits.shape[0], width), dtype=np.int64)
    log_softmax_topk_v1(np.ascontiguousarray(logits), banned, values, ids)
    return values, ids
