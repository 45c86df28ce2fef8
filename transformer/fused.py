"""The Transformer's fused ops: the same equations as the readable code, one Function each.

Shapes: B batch, H heads, Tq queries, Tk keys, D = d_model, K = d_k, Kv = d_v.

`TransformerConfig.impl = "fused"` runs these; `"composed"` (the default) runs the
op-by-op code they replace. Each has its twin, and tests/test_fused_vs_composed.py
ties the two together (values and gradients in float64), as does a test that trains
a few steps both ways:

    Attention            the four lines of §3.2.1, Eq. (1) per head, with the head split and merge
                         of §3.2.2 (twin: split_heads -> scaled_dot_product_attention -> merge_heads
                         in attention.py): one op each way instead of twelve
    DropoutAddLayerNorm  the post-norm sub-layer connection LayerNorm(x + Dropout(Sublayer(x)))
                         of §3.1 and §5.4 (twin: SublayerConnection's composed branch in layers.py)

Why fuse at all: a base-model step has ~430 graph ops composed and ~170 fused; on a GPU
each op is at least one kernel launch and a Python call, and fewer ops keep fewer
intermediates alive for backward.
"""
from __future__ import annotations

import math

from minitensor import Function
from minitensor.functions import inverted_dropout, layer_norm_backward, layer_norm_forward


class Attention(Function):
    """Multi-head scaled dot-product attention in one Function (§3.2.1, Eq. (1); §3.2.2).

    q (B, Tq, H·K), k (B, Tk, H·K), v (B, Tk, H·Kv) hold the H heads side by side in
    the last axis, as the projections W^Q, W^K, W^V make them. Per head:

        S = Q Kᵀ,  W = softmax(S/√d_k, mask),  D = Dropout_p(W),  O = D V        §3.2.1, Eq. (1)

    Returns Concat(O_1, ..., O_H) (B, Tq, H·Kv), and the weights W (B, H, Tq, Tk) as aux.
    Backward runs the four lines in reverse (W and the seed are all it keeps beyond q, k, v):

        dD = dO Vᵀ,  dV = Dᵀ dO,  dW = Dropout_p(dD),  dS = softmax_backward(W, dW),  dQ = dS K,  dK = dSᵀ Q
    """

    has_aux = True

    @staticmethod
    def forward(ctx, q, k, v, *, heads, mask=None, p=0.0, seed=None):
        backend, xp = ctx.backend, ctx.backend.xp
        # (B, T, H·d) -> (B, H, T, d), copied once so that each product is one batched GEMM over
        # B·H matrices one stride apart; a transposed operand (Kᵀ, Dᵀ, dSᵀ) is a view, not a copy.
        qh, kh, vh = (xp.ascontiguousarray(split_heads(a, heads)) for a in (q, k, v))
        scores = backend.matmul(qh, xp.swapaxes(kh, -1, -2))                # (B, H, Tq, K) @ (B, H, K, Tk)
        weights = backend.softmax_forward(scores, _scale(qh), mask)          # §3.2.1, Eq. (1): softmax(QKᵀ/√d_k)
        ctx.save_for_backward(qh, kh, vh, weights)
        out = backend.matmul(inverted_dropout(backend, weights, p, seed), vh)   # (B, H, Tq, Tk) @ (B, H, Tk, Kv)
        return merge_heads(out), weights                                     # (B, H, Tq, Kv) -> (B, Tq, H·Kv)

    @staticmethod
    def backward(ctx, grad_out):
        qh, kh, vh, weights = ctx.saved
        backend, xp = ctx.backend, ctx.backend.xp
        p, seed = ctx.params["p"], ctx.params["seed"]
        d_out = xp.ascontiguousarray(split_heads(grad_out, qh.shape[1]))     # (B, Tq, H·Kv) -> (B, H, Tq, Kv)
        d_dropped = backend.matmul(d_out, xp.swapaxes(vh, -1, -2))           # dD = dO Vᵀ, (B, H, Tq, Tk)
        d_weights = inverted_dropout(backend, d_dropped, p, seed)            # dW: the same mask
        d_scores = backend.softmax_backward(weights, d_weights, _scale(qh))  # dS (the 1/√d_k included)
        need_q, need_k, need_v = ctx.needs_input_grad
        dq = merge_heads(backend.matmul(d_scores, kh)) if need_q else None                        # dQ = dS K
        dk = merge_heads(backend.matmul(xp.swapaxes(d_scores, -1, -2), qh)) if need_k else None   # dK = dSᵀ Q
        dv = None
        if need_v:
            dropped = inverted_dropout(backend, weights, p, seed)            # D again, from W and the seed
            dv = merge_heads(backend.matmul(xp.swapaxes(dropped, -1, -2), d_out))                 # dV = Dᵀ dO
        return dq, dk, dv


def _scale(qh) -> float:
    return 1.0 / math.sqrt(qh.shape[-1])                                     # §3.2.1: 1/√d_k


def split_heads(a, heads: int):
    """Array (B, T, H·d) -> (B, H, T, d), a view: attention.split_heads on raw arrays (§3.2.2)."""
    B, T, width = a.shape
    return a.reshape(B, T, heads, width // heads).transpose(0, 2, 1, 3)


def merge_heads(a):
    """Array (B, H, T, d) -> (B, T, H·d): Concat(head_1, ..., head_H) on raw arrays (§3.2.2)."""
    B, H, T, d = a.shape
    return a.transpose(0, 2, 1, 3).reshape(B, T, H * d)


class DropoutAddLayerNorm(Function):
    """y = LayerNorm(x + Dropout_p(s)): the paper's sub-layer connection in one Function (§3.1, §5.4).

    x is the residual stream, s the sub-layer's output ("we apply dropout to the output
    of each sub-layer, before it is added to the sub-layer input and normalized", §5.4).
    One op instead of three (dropout, add, layernorm), each way. Backward: dz from the
    layernorm kernel for z = x + Dropout_p(s), then dx = dz and ds = Dropout_p(dz) with
    the same mask, regenerated from the seed. γ, β may be float32 masters under half-precision
    activations (read as they are; their gradients come back in float32).
    """

    @staticmethod
    def forward(ctx, x, s, gamma, beta, *, eps, p=0.0, seed=None):
        z = ctx.backend.add(x, inverted_dropout(ctx.backend, s, p, seed))    # x + Dropout(Sublayer(x))
        return layer_norm_forward(ctx, z, gamma, beta, eps)                   # §3.1: LayerNorm(...)

    @staticmethod
    def backward(ctx, grad_out):
        dz, dgamma, dbeta = layer_norm_backward(ctx, grad_out)
        ds = inverted_dropout(ctx.backend, dz, ctx.params["p"], ctx.params["seed"])   # the same mask
        return dz, ds, dgamma, dbeta
