"""The encoder's self-attention in fast decoding (transformer/fast_search.py): §3.2.1 Eq. (1) for every sentence
and head of a batch at once, beside its NumPy reference.

All S positions of a sentence query the same S keys and values, so one head of one sentence is
softmax(Q Kᵀ / √d_k) V with Q, K, V (S, K) matrices: two small matrix products. NumPy hands the B·H products
of a batch to BLAS, reading Q, K and V where they lie in the (B·S, 3D) projection, and BLAS blocks them in
registers (each key entry loaded feeds several queries). The decoder's per-row kernel
(decode_kernels.cross_attention_step), which sums every (query, key, head) product across vector lanes, took
1.5-3x longer (measured on the demo's shapes, D = 64, h = 4, S 13-40, and the base model's, D = 512, h = 8).

masked_softmax  the softmax between the two products, scaled, padding keys weight 0 (in place); a Numba
                kernel: NumPy's makes five passes over the (B, H, S, S) scores (2-3x slower, measured).

Shapes: B sentences, S source length, D = d_model, H heads, K = D/H.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from minitensor.kernels.numba_math import exp_like

from .decode_kernels import FASTMATH, _attention_ref


# --- references (NumPy, float64 accumulation) ------------------------------------------------
def masked_softmax_ref(scores, valid, scale):
    """scores (B, H, S, S) -> softmax(scale · scores) over the last axis, where valid (B, S) is False: weight 0."""
    z = np.where(valid[:, None, None, :], scores.astype(np.float64) * scale, -np.inf)
    z = np.exp(z - z.max(-1, keepdims=True))
    return (z / z.sum(-1, keepdims=True)).astype(scores.dtype)


def encoder_attention_ref(qkv, bias, valid, heads):
    """qkv + bias (B·S, 3D): each source position's query over its own sentence's keys and values, where
    valid (B, S) -> (B·S, D)."""
    B, S = valid.shape
    D = qkv.shape[1] // 3
    q, k, v = ((qkv[:, j * D:(j + 1) * D] + bias[j * D:(j + 1) * D]).reshape(B, S, D) for j in range(3))
    sentence = np.repeat(np.arange(B), S)
    return _attention_ref(q.reshape(B * S, D), k[sentence], v[sentence], heads, valid[sentence])


# --- Numba --------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, fastmath=FASTMATH)
def masked_softmax_v1(scores, valid, scale):
    B, heads, S, L = scores.shape
    factor = scores.dtype.type(scale)                                     # in the scores' dtype
    mask = np.empty(L, scores.dtype)                                      # 0, or -inf at padding: weight 0
    for b in range(B):
        for j in range(L):
            mask[j] = 0 if valid[b, j] else -np.inf
        for h in range(heads):
            block = scores[b, h]                                          # (S, L), contiguous
            for i in range(S):
                row = block[i]
                top = -np.inf * factor
                for j in range(L):
                    x = row[j] * factor + mask[j]                         # §3.2.1: q·k / √d_k
                    top = x if x > top else top
                for j in range(L):
                    row[j] = row[j] * factor + mask[j] - top
            # The exps of the whole block in one loop: a row's few vectors alone would wait on each other's
            # chain of FMAs (measured: this loop makes the kernel 2-2.5x faster on rows of 13-19).
            flat = block.reshape(S * L)
            for p in range(S * L):
                flat[p] = exp_like(flat[p], flat) if flat[p] > -np.inf else 0 * factor
            for i in range(S):
                row = block[i]
                total = 0.0
                for j in range(L):
                    total += row[j]
                inv = row.dtype.type(1.0 / total)
                for j in range(L):
                    row[j] *= inv


# --- what fast_search.py calls --------------------------------------------------------------------
def masked_softmax(scores, valid, scale):
    """In place: see masked_softmax_ref."""
    masked_softmax_v1(scores, valid, scale)
    return scores


def encoder_attention(qkv, bias, valid, heads, scores=None, out=None):
    """See encoder_attention_ref; qkv becomes qkv + bias (in place). Written into scores (B·H·S, S), scratch,
    and out (B·S, D); fresh arrays where None."""
    B, S = valid.shape
    D = qkv.shape[1] // 3
    K = D // heads
    qkv += bias
    q, k, v = qkv.reshape(B, S, 3, heads, K).transpose(2, 0, 3, 1, 4)     # (B, H, S, K) views each
    scores = np.empty((B * heads * S, S), qkv.dtype) if scores is None else scores
    out = np.empty((B * S, D), qkv.dtype) if out is None else out
    scores = np.matmul(q, k.transpose(0, 1, 3, 2), out=scores.reshape(B, heads, S, S))   # Q Kᵀ
    masked_softmax(scores, valid, 1.0 / math.sqrt(K))                     # softmax(· / √d_k), padding 0
    np.matmul(scores, v, out=out.reshape(B, S, heads, K).transpose(0, 2, 1, 3))   # Concat(head_1, ..., head_h)
    return out
