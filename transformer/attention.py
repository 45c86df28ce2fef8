"""Scaled dot-product attention (§3.2.1, Eq. (1)) and multi-head attention (§3.2.2).

Shapes: B batch, H heads, Tq queries, Tk keys, D = d_model, K = d_k, Kv = d_v.

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V                        §3.2.1, Eq. (1)
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
        head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)                    §3.2.2

All heads run at once: the h projections W_i^Q are the column blocks of one
(D, H·K) matrix `w_q`, and heads are a batch axis of the matmuls (no loop).
The scale 1/√d_k and the mask go into the one fused softmax call.
Attention weights are returned, never stored on the module.
"""
from __future__ import annotations

import math

import numpy as np

import minitensor as mt
from minitensor import nn


def scaled_dot_product_attention(q, k, v, mask=None, dropout=None):
    """§3.2.1, Eq. (1) for q (B, H, Tq, K), k (B, H, Tk, K), v (B, H, Tk, Kv).

    mask: bool broadcastable to (B, H, Tq, Tk), True = blocked (weight exactly 0; a
    fully blocked row gives zeros). Returns (output (B, H, Tq, Kv), weights (B, H, Tq, Tk)).
    """
    scores = q @ k.transpose(-1, -2)                                   # (B, H, Tq, K) @ (B, H, K, Tk) -> (B, H, Tq, Tk)
    weights = scores.softmax(-1, scale=1.0 / math.sqrt(q.shape[-1]), mask=mask)   # §3.2.1, Eq. (1): softmax(QKᵀ/√d_k)
    dropped = weights if dropout is None else dropout(weights)
    return dropped @ v, weights                                        # (B, H, Tq, Tk) @ (B, H, Tk, Kv) -> (B, H, Tq, Kv)


class MultiHeadAttention(nn.Module):
    """§3.2.2 with separate named projections w_q, w_k, w_v (D -> H·K) and w_o (H·Kv -> D)."""

    def __init__(self, d_model: int, h: int, d_k: int, d_v: int, rng: np.random.Generator,
                 attention_dropout: float = 0.0):
        super().__init__()
        self.h, self.d_k, self.d_v = h, d_k, d_v
        self.w_q = nn.Linear(d_model, h * d_k, rng=rng)
        self.w_k = nn.Linear(d_model, h * d_k, rng=rng)
        self.w_v = nn.Linear(d_model, h * d_v, rng=rng)
        self.w_o = nn.Linear(h * d_v, d_model, rng=rng)
        # paper silent on dropout of the attention weights; off unless config.attention_dropout > 0
        self.dropout = nn.Dropout(attention_dropout, rng=rng) if attention_dropout > 0 else None

    # --- projections into heads --------------------------------------------------------
    def _heads(self, x: mt.Tensor, d: int) -> mt.Tensor:
        B, T = x.shape[0], x.shape[1]
        return x.reshape(B, T, self.h, d).permute(0, 2, 1, 3)          # (B, T, H·d) -> (B, T, H, d) -> (B, H, T, d)

    def project_q(self, x: mt.Tensor) -> mt.Tensor:
        return self._heads(self.w_q(x), self.d_k)                      # §3.2.2: Q W^Q, (B, Tq, D) -> (B, H, Tq, K)

    def project_kv(self, x: mt.Tensor) -> tuple[mt.Tensor, mt.Tensor]:
        k = self._heads(self.w_k(x), self.d_k)                         # §3.2.2: K W^K, (B, Tk, D) -> (B, H, Tk, K)
        v = self._heads(self.w_v(x), self.d_v)                         # §3.2.2: V W^V, (B, Tk, D) -> (B, H, Tk, Kv)
        return k, v

    def attend(self, q, k, v, mask=None) -> tuple[mt.Tensor, mt.Tensor]:
        """Heads in, d_model out: (output (B, Tq, D), weights (B, H, Tq, Tk))."""
        out, weights = scaled_dot_product_attention(q, k, v, mask, self.dropout)   # (B, H, Tq, Kv)
        B, _, Tq, _ = out.shape
        out = out.permute(0, 2, 1, 3).reshape(B, Tq, self.h * self.d_v)   # §3.2.2: Concat(heads), (B, H, Tq, Kv) -> (B, Tq, H·Kv)
        return self.w_o(out), weights                                  # §3.2.2: Concat(...) W^O, (B, Tq, H·Kv) -> (B, Tq, D)

    def forward(self, query: mt.Tensor, memory: mt.Tensor | None = None, mask=None):
        """Self-attention when memory is None (§3.2.3), else queries attend to memory (encoder-decoder).

        Returns (output (B, Tq, D), weights (B, H, Tq, Tk)).
        """
        k, v = self.project_kv(query if memory is None else memory)
        return self.attend(self.project_q(query), k, v, mask)
