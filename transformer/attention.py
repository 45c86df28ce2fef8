"""Scaled dot-product attention (§3.2.1, Eq. (1)) and multi-head attention (§3.2.2).

Shapes: B batch, H heads, Tq queries, Tk keys, D = d_model, K = d_k, Kv = d_v.

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V                        §3.2.1, Eq. (1)
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
        head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)                    §3.2.2

All heads run at once: the h projections W_i^Q are the column blocks of one
(D, H·K) matrix `w_q`, and heads are a batch axis of the matmuls (no loop).
`scaled_dot_product_attention` below is Eq. (1) written op by op, and it is what
runs with `config.impl = "composed"` (the default). With `impl = "fused"` the same
equations run as one Function (transformer.fused.Attention: scale, mask, dropout and
the head split and merge inside, on time-major tokens so that neither is a copy), and the
projections of one input as one product; tests tie both to this code, values and gradients.
Attention weights are returned, never stored on the module.
"""
from __future__ import annotations

import math

import numpy as np

import minitensor as mt
from minitensor import nn
from minitensor.functions import StackedLinear

from .fused import Attention


def scaled_dot_product_attention(q, k, v, mask=None, dropout=None):
    """§3.2.1, Eq. (1) for q (B, H, Tq, K), k (B, H, Tk, K), v (B, H, Tk, Kv).

    mask: bool broadcastable to (B, H, Tq, Tk), True = blocked (weight exactly 0; a
    fully blocked row gives zeros). Returns (output (B, H, Tq, Kv), weights (B, H, Tq, Tk)).
    """
    scores = q @ k.transpose(-1, -2)                                   # (B, H, Tq, K) @ (B, H, K, Tk) -> (B, H, Tq, Tk)
    weights = scores.softmax(-1, scale=1.0 / math.sqrt(q.shape[-1]), mask=mask)   # §3.2.1, Eq. (1): softmax(QKᵀ/√d_k)
    dropped = weights if dropout is None else dropout(weights)
    return dropped @ v, weights                                        # (B, H, Tq, Tk) @ (B, H, Tk, Kv) -> (B, H, Tq, Kv)


def split_heads(x: mt.Tensor, h: int) -> mt.Tensor:
    """(B, T, H·d) -> (B, H, T, d): head i is the i-th block of d columns (§3.2.2)."""
    B, T, width = x.shape
    return x.reshape(B, T, h, width // h).permute(0, 2, 1, 3)          # (B, T, H·d) -> (B, T, H, d) -> (B, H, T, d)


def merge_heads(x: mt.Tensor) -> mt.Tensor:
    """(B, H, T, d) -> (B, T, H·d): Concat(head_1, ..., head_h) (§3.2.2), the inverse of split_heads."""
    B, H, T, d = x.shape
    return x.permute(0, 2, 1, 3).reshape(B, T, H * d)


class MultiHeadAttention(nn.Module):
    """§3.2.2 with separate named projections w_q, w_k, w_v (D -> H·K) and w_o (H·Kv -> D).

    Queries, keys and values stay packed (·, ·, H·K) outside the attention op: that is also the
    layout of the decoder's key/value cache, which holds what `project_kv` returns.
    fused (config.impl = "fused"): tokens are time-major (T, B, ·); the projections of one input
    run as one product (StackedLinear: Q, K, V of the same tokens, K, V of the memory), stacked
    (3 or 2, T, B, H·K), and Attention reads its heads from there in place; the batch axis of
    what project_kv returns is then 2 (`kv_batch_axis`), not 0.
    output_bias False: W^O leaves its bias out, for the sub-layer connection to add (layers.py).
    """

    def __init__(self, d_model: int, h: int, d_k: int, d_v: int, rng: np.random.Generator,
                 attention_dropout: float = 0.0, fused: bool = False, output_bias: bool = True):
        super().__init__()
        self.h, self.d_k, self.d_v, self.fused = h, d_k, d_v, fused
        self.w_q = nn.Linear(d_model, h * d_k, rng=rng)
        self.w_k = nn.Linear(d_model, h * d_k, rng=rng)
        self.w_v = nn.Linear(d_model, h * d_v, rng=rng)
        self.w_o = nn.Linear(h * d_v, d_model, rng=rng)
        self.w_o.add_bias = output_bias
        # paper silent on dropout of the attention weights; off unless config.attention_dropout > 0
        self.dropout = nn.Dropout(attention_dropout, rng=rng) if attention_dropout > 0 else None
        self._project, self.kv_batch_axis = (_stacked, 2) if fused else (_separate, 0)

    def project_q(self, x: mt.Tensor) -> mt.Tensor:
        return self.w_q(x)                                             # §3.2.2: Q W_i^Q for every i, (B, Tq, D) -> (B, Tq, H·K)

    def project_kv(self, x: mt.Tensor) -> tuple:
        """§3.2.2: K W_i^K, V W_i^V: (k (B, Tk, H·K), v (B, Tk, H·Kv)); fused: (kv (2, Tk, B, H·K),), one product."""
        return self._project(x, self.w_k, self.w_v)

    def attend(self, q, *kv, mask=None) -> tuple[mt.Tensor, mt.Tensor]:
        """Queries and what project_kv made (or, fused, one stacked qkv) -> (output (·, ·, D), weights (B, H, Tq, Tk))."""
        mask = None if mask is None else q.backend.asarray(mask)
        if self.fused:                                                 # the same equations as one op (fused.py)
            p, seed = self.dropout.draw() if self.dropout is not None else (0.0, None)
            heads, weights = Attention.apply(q, *kv, heads=self.h, mask=mask, p=p, seed=seed, time_major=True)
            return self.w_o(heads), mt.Tensor._wrap(weights, q.backend)
        k, v = kv
        out, weights = scaled_dot_product_attention(                    # §3.2.1, Eq. (1) for every head at once
            split_heads(q, self.h), split_heads(k, self.h), split_heads(v, self.h), mask, self.dropout)
        heads = merge_heads(out)                                       # §3.2.2: Concat(head_1, ..., head_h)
        return self.w_o(heads), weights                                # §3.2.2: Concat(...) W^O, (B, Tq, H·Kv) -> (B, Tq, D)

    def forward(self, query: mt.Tensor, memory: mt.Tensor | None = None, mask=None):
        """Self-attention when memory is None (§3.2.3), else queries attend to memory (encoder-decoder).

        Returns (output (B, Tq, D), weights (B, H, Tq, Tk)).
        """
        if memory is None:                                             # Q, K, V of the same tokens (fused: one product)
            return self.attend(*self._project(query, self.w_q, self.w_k, self.w_v), mask=mask)
        return self.attend(self.project_q(query), *self.project_kv(memory), mask=mask)


def _separate(x: mt.Tensor, *linears: nn.Linear) -> tuple:
    """x W_s + b_s for each of the Linears, one product each."""
    return tuple(linear(x) for linear in linears)


def _stacked(x: mt.Tensor, *linears: nn.Linear) -> tuple:
    """x W_s + b_s for each of the Linears, stacked in one (n, ..., out) Tensor made by one product (StackedLinear),
    in a tuple like _separate's."""
    params = [linear.weight for linear in linears] + [linear.bias for linear in linears]
    half = tuple(p.half(x.dtype) for p in params)                     # the optimizer's copies in x's dtype, if any
    return (StackedLinear.apply(x, *params, half=half if all(h is not None for h in half) else None),)
