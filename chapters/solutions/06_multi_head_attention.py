"""Solutions to chapter 06's exercises (checked by `check_split_merge`, `check_mhsa`)."""
import math

import numpy as np


def split_heads(x, h):
    """(B, T, D) -> (B, h, T, D/h); head i holds features i·D/h .. (i+1)·D/h − 1."""
    B, T, D = x.shape
    return x.reshape(B, T, h, D // h).transpose(0, 2, 1, 3)


def merge_heads(x):
    """(B, h, T, K) -> (B, T, h·K), the inverse of split_heads (§3.2.2 Concat)."""
    B, h, T, K = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, h * K)


def multi_head_self_attention(x, wq, wk, wv, wo, h):
    """§3.2.2 with all heads as a batch axis: Concat(heads) W^O for Q = K = V = x."""
    q, k, v = (split_heads(x @ w, h) for w in (wq, wk, wv))       # (B, h, T, K)
    s = q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1])           # (B, h, T, T)
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return merge_heads(w @ v) @ wo                                 # (B, T, D)


PREDICT = """Exercise 1. 4 · (512 · 512 + 512) = 1,050,624 parameters for h = 1, 8 and 16 alike: the h
projections to d_k = 512/h columns each are one 512 × 512 matrix, whatever h is. Table 3 row (A) changes
how those columns are grouped into heads, not how many weights there are (it keeps the computation
constant too, as section 5 counted)."""
