"""The Transformer's fused ops: the same equations as the readable code, one Function each.

Shapes: B batch, H heads, Tq queries, Tk keys, D = d_model, K = d_k, Kv = d_v.
The fused model runs its stacks time-major, tokens (T, B, D) (model.py says why).

`TransformerConfig.impl = "fused"` runs these; `"composed"` (the default) runs the
op-by-op code they replace. Each has its twin, and tests/minitensor/test_fused_vs_composed.py
ties the two together (values and gradients in float64), as does a test that trains
a few steps both ways:

    Attention            the four lines of §3.2.1, Eq. (1) per head, with the head split and merge
                         of §3.2.2 (twin: split_heads -> scaled_dot_product_attention -> merge_heads
                         in attention.py): one op each way instead of twelve; time-major tokens,
                         so no head split or merge is a copy
    DropoutAddLayerNorm  the post-norm sub-layer connection LayerNorm(x + Dropout(Sublayer(x)))
                         of §3.1 and §5.4, the bias of the sub-layer's last Linear included (twin:
                         SublayerConnection's composed branch in layers.py): one kernel each way

Why fuse at all: a base-model step has ~430 graph ops composed and ~170 fused; on a GPU
each op is at least one kernel launch and a Python call, and fewer ops keep fewer
intermediates alive for backward.
"""
from __future__ import annotations

import math

from minitensor import Function
from minitensor.functions import inverted_dropout


class Attention(Function):
    """Multi-head scaled dot-product attention in one Function (§3.2.1, Eq. (1); §3.2.2).

    Inputs: Q, K, V with the H heads side by side in the last axis, as the projections W^Q, W^K,
    W^V make them: q (B, Tq, H·K), k (B, Tk, H·K), v (B, Tk, H·Kv), or stacked along a new first
    axis when one product made them (StackedLinear): (q, kv) with kv (2, B, Tk, H·K), or one qkv
    (3, B, T, H·K). Per head:

        S = Q Kᵀ,  W = softmax(S/√d_k, mask),  D = Dropout_p(W),  O = D V        §3.2.1, Eq. (1)

    Returns Concat(O_1, ..., O_H) (B, Tq, H·Kv), and the weights W (B, H, Tq, Tk) as aux.
    `time_major`: tokens come and go as (T, B, ·) instead of (B, T, ·) (every array above, with
    B and T swapped). Then head h of sentence b is one fixed stride after head h-1 (the rows of
    every head are B·H·K apart), so each product is one strided-batched GEMM that reads Q, K, V
    and writes O where they lie: no head split or merge copies, in either direction. Batch-major
    arrays are copied into (B, H, T, d) by the products instead.
    Backward runs the four lines in reverse (W and the seed are all it keeps beyond Q, K, V):

        dD = dO Vᵀ,  dV = Dᵀ dO,  dW = Dropout_p(dD),  dS = softmax_backward(W, dW),  dQ = dS K,  dK = dSᵀ Q

    and returns the gradients packed as the inputs came.
    """

    has_aux = True

    @staticmethod
    def forward(ctx, *packed, heads, mask=None, p=0.0, seed=None, time_major=False):
        backend = ctx.backend
        q, k, v = unpacked(packed)
        qh, kh, vh = (split_heads(a, heads, time_major) for a in (q, k, v))  # (B, H, T, d) views
        scores = backend.matmul(qh, backend.xp.swapaxes(kh, -1, -2))         # (B, H, Tq, K) @ (B, H, K, Tk)
        weights = backend.softmax_forward(scores, _scale(qh), mask)          # §3.2.1, Eq. (1): softmax(QKᵀ/√d_k)
        ctx.save_for_backward(*packed, weights)
        out = backend.xp.empty(q.shape[:-1] + (heads * vh.shape[-1],), dtype=q.dtype)   # (·, ·, H·Kv)
        product_into(backend, inverted_dropout(backend, weights, p, seed), vh, out, heads, time_major)   # D V
        return out, weights                                                  # Concat(O_1..O_H), (B, H, Tq, Tk)

    @staticmethod
    def backward(ctx, grad_out):
        *packed, weights = ctx.saved
        backend, xp, params = ctx.backend, ctx.backend.xp, ctx.params
        H, time_major, p, seed = params["heads"], params["time_major"], params["p"], params["seed"]
        qh, kh, vh = (split_heads(a, H, time_major) for a in unpacked(packed))
        d_out = split_heads(grad_out, H, time_major)                         # (·, ·, H·Kv) -> (B, H, Tq, Kv) view
        d_dropped = backend.matmul(d_out, xp.swapaxes(vh, -1, -2))           # dD = dO Vᵀ, (B, H, Tq, Tk)
        d_weights = inverted_dropout(backend, d_dropped, p, seed)            # dW: the same mask
        d_scores = backend.softmax_backward(weights, d_weights, _scale(qh))  # dS (the 1/√d_k included)
        grads = [xp.empty_like(a) if need else None for a, need in zip(packed, ctx.needs_input_grad)]
        dq, dk, dv = unpacked(grads)
        if dq is not None:
            product_into(backend, d_scores, kh, dq, H, time_major)                                  # dQ = dS K
        if dk is not None:
            product_into(backend, xp.swapaxes(d_scores, -1, -2), qh, dk, H, time_major)             # dK = dSᵀ Q
        if dv is not None:
            dropped = inverted_dropout(backend, weights, p, seed)            # D again, from W and the seed
            product_into(backend, xp.swapaxes(dropped, -1, -2), d_out, dv, H, time_major)           # dV = Dᵀ dO
        return tuple(grads)


def _scale(qh) -> float:
    return 1.0 / math.sqrt(qh.shape[-1])                                     # §3.2.1: 1/√d_k


def unpacked(packed):
    """(q, k, v) from the inputs as Attention takes them: (q, k, v), (q, kv) or (qkv,) (None stays None)."""
    if len(packed) == 3:
        return tuple(packed)
    if len(packed) == 2:
        q, kv = packed
        return (q, None, None) if kv is None else (q, kv[0], kv[1])
    (qkv,) = packed
    return (None, None, None) if qkv is None else (qkv[0], qkv[1], qkv[2])


def split_heads(a, heads: int, time_major: bool = False):
    """Array (B, T, H·d) -> (B, H, T, d), a view: attention.split_heads on raw arrays (§3.2.2).

    time_major: a is (T, B, H·d); the view is still (B, H, T, d), now with one stride between heads.
    """
    if time_major:
        T, B, width = a.shape
        return a.reshape(T, B, heads, width // heads).transpose(1, 2, 0, 3)
    B, T, width = a.shape
    return a.reshape(B, T, heads, width // heads).transpose(0, 2, 1, 3)


def product_into(backend, a, b, out, heads: int, time_major: bool) -> None:
    """out (·, ·, H·d) = Concat over heads of a @ b ((B, H, T, d) each): time-major, written in place."""
    view = split_heads(out, heads, time_major)                               # (B, H, T, d), a view of out
    if time_major:
        backend.matmul(a, b, out=view)
    else:
        view[...] = backend.matmul(a, b)                                     # one copy: heads to their columns


class DropoutAddLayerNorm(Function):
    """y = LayerNorm(x + Dropout_p(s + b)): the paper's sub-layer connection in one Function (§3.1, §5.4).

    x is the residual stream, s the sub-layer's output ("we apply dropout to the output of each
    sub-layer, before it is added to the sub-layer input and normalized", §5.4) and b, an optional
    fifth input, the bias of the sub-layer's last Linear (W^O or W₂), added here instead of by
    the product (that Linear is built with add_bias False: layers.folds_output_bias). One kernel each way
    (the backward's column sums are a second, small one), instead of a bias fill, dropout, add and
    LayerNorm forward and dropout, LayerNorm's two and a gradient add backward. Backward: dz from
    LayerNorm's backward for z = x + Dropout_p(s + b), then dx = dz, ds = Dropout_p(dz) with the
    same mask (regenerated from the seed), db = Σ_rows ds. y feeds both the next sub-layer and the
    residual stream, so its gradient comes in two parts, which the kernel adds as it reads them
    (sums_grad_out). γ, β may be float32 masters under half-precision activations (read as they
    are; their gradients, and b's, come back in float32). `half`: the optimizer's copy of b in x's
    dtype; `time_major`: x is (T, B, D), masked as its (B, T, D) transpose would be.
    """

    sums_grad_out = True

    @staticmethod
    def forward(ctx, x, s, gamma, beta, *bias, eps, p=0.0, seed=None, time_major=False, half=None):
        b = (ctx.backend.cast(bias[0], x.dtype) if half is None else half) if bias else None
        y, z, mean, rstd = ctx.backend.dropout_add_layernorm(x, s, b, gamma, beta, eps, p, seed, time_major)
        ctx.save_for_backward(z, gamma, mean, rstd)                           # §3.1: LayerNorm(x + Dropout(...))
        return y

    @staticmethod
    def backward(ctx, grad_outs):
        z, gamma, mean, rstd = ctx.saved
        params, with_bias = ctx.params, len(ctx.needs_input_grad) == 5
        dx, ds, dgamma, dbeta, dbias = ctx.backend.dropout_add_layernorm_grad(
            grad_outs, z, gamma, mean, rstd, params["p"], params["seed"], params["time_major"], with_bias)
        return (dx, ds, dgamma, dbeta, dbias) if with_bias else (dx, ds, dgamma, dbeta)
