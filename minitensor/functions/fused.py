"""Fused ops: one Function (one kernel call each way) for a composite formula.

Each has a composed twin in `composed.py`, built only from primitives, and
tests check values and gradients of the two against each other. The kernels
themselves come from the tensor's backend (see kernels/README.md).
"""
from __future__ import annotations

import math

from ..autograd import Function


class Linear(Function):
    """y = x W + b over the last axis (§3.3, Eq. (2): xW₁ + b₁), computed in x's dtype.

    One Function instead of cast + matmul + expand + add: a Transformer step has
    ~100 of these, and on a GPU each avoided op is a launch and a Python call
    saved. Rows of x are flattened so each product is a single GEMM.
    dx = dy Wᵀ, dW = xᵀ dy, db = Σ_rows dy = 1ᵀ dy; dW and db come back in the dtype of
    the (float32 master) weights. Composed twin: `x @ W + b`.
    """

    @staticmethod
    def forward(ctx, x, weight, *bias):
        xp = ctx.backend.xp
        w = weight.astype(x.dtype, copy=False)                 # fp16 copy of the master weight in mixed precision
        rows = x.reshape(-1, x.shape[-1])                      # (..., in) -> (R, in)
        y = xp.matmul(rows, w)                                 # (R, in) @ (in, out) -> (R, out)
        if bias:
            y += bias[0].astype(x.dtype, copy=False)
        ctx.save_for_backward(rows, w)
        ctx.x_shape, ctx.w_dtype = x.shape, weight.dtype
        return y.reshape(x.shape[:-1] + (w.shape[1],))         # (R, out) -> (..., out)

    @staticmethod
    def backward(ctx, grad_out):
        rows, w = ctx.saved
        xp = ctx.backend.xp
        g = grad_out.reshape(-1, grad_out.shape[-1])           # (..., out) -> (R, out)
        dx = xp.matmul(g, w.T).reshape(ctx.x_shape) if ctx.needs_input_grad[0] else None
        dw = xp.matmul(rows.T, g).astype(ctx.w_dtype, copy=False) if ctx.needs_input_grad[1] else None
        if len(ctx.needs_input_grad) == 2:
            return dx, dw
        db = None
        if ctx.needs_input_grad[2]:
            # db = 1ᵀ dy as one matrix-vector product (BLAS / cuBLAS), accumulated in float32 at least.
            # Not g.sum(axis=0): CuPy reduces the leading axis of a (rows, out) array with a few
            # thousand threads striding down the columns, ~1 ms per call at Transformer-base sizes.
            acc = xp.promote_types(g.dtype, xp.float32)
            db = xp.matmul(xp.ones(g.shape[0], dtype=acc), g.astype(acc, copy=False)).astype(ctx.w_dtype, copy=False)
        return dx, dw, db


class Softmax(Function):
    """y = softmax(scale·x) over the last axis, blocked entries (mask True) get weight 0.

    §3.2.1, Eq. (1) uses it with scale = 1/√d_k; §3.2.3 masks illegal
    connections with −∞. dy/dx: dx = scale · y ⊙ (dy − Σ dy⊙y).
    """

    @staticmethod
    def forward(ctx, x, *, scale=1.0, mask=None):
        y = ctx.backend.softmax_forward(x, scale, mask)
        ctx.save_for_backward(y)
        ctx.scale = scale
        return y

    @staticmethod
    def backward(ctx, grad_out):
        (y,) = ctx.saved
        return ctx.backend.softmax_backward(y, grad_out, ctx.scale)


class LogSoftmax(Function):
    """y = x − max − log Σ exp(x − max) over the last axis;  dx = dy − softmax(x) · Σ dy"""

    @staticmethod
    def forward(ctx, x):
        xp = ctx.backend.xp
        shifted = x - x.max(axis=-1, keepdims=True)           # stable: exp never overflows
        y = shifted - xp.log(xp.exp(shifted).sum(axis=-1, keepdims=True))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_out):
        (y,) = ctx.saved
        xp = ctx.backend.xp
        return grad_out - xp.exp(y) * grad_out.sum(axis=-1, keepdims=True)


class LayerNorm(Function):
    """y = (x − mean)/√(var + eps) · γ + β over the last axis (§3.1, LayerNorm(x + Sublayer(x))).

    Forward keeps mean and rstd; backward (term by term in the kernel):
    dx = rstd·(g − mean(g) − x̂·mean(g⊙x̂)) with g = dy⊙γ, dγ = Σ dy⊙x̂, dβ = Σ dy.
    """

    @staticmethod
    def forward(ctx, x, gamma, beta, *, eps):
        return _layernorm_forward(ctx, x, gamma, beta, eps)

    @staticmethod
    def backward(ctx, grad_out):
        return _layernorm_backward(ctx, grad_out)


class DropoutAddLayerNorm(Function):
    """y = LayerNorm(x + Dropout_p(s)): the paper's sub-layer connection in one Function (§3.1, §5.4).

    x is the residual stream, s the sub-layer's output ("we apply dropout to the output
    of each sub-layer, before it is added to the sub-layer input and normalized", §5.4).
    One op instead of three (dropout, add, layernorm), each way. Backward: dz from the
    layernorm kernel for z = x + Dropout_p(s), then dx = dz and ds = Dropout_p(dz) with
    the same mask, regenerated from the seed. Composed twin: `dropout_add_layer_norm_composed`.
    """

    @staticmethod
    def forward(ctx, x, s, gamma, beta, *, eps, p=0.0, seed=None):
        ctx.p, ctx.seed = p, seed
        return _layernorm_forward(ctx, x + _dropout(ctx.backend, s, p, seed), gamma, beta, eps)

    @staticmethod
    def backward(ctx, grad_out):
        dz, dgamma, dbeta = _layernorm_backward(ctx, grad_out)
        return dz, _dropout(ctx.backend, dz, ctx.p, ctx.seed), dgamma, dbeta


def _layernorm_forward(ctx, x, gamma, beta, eps):
    ctx.param_dtype = gamma.dtype                             # float32 masters under float16 activations
    gamma, beta = gamma.astype(x.dtype, copy=False), beta.astype(x.dtype, copy=False)
    y, mean, rstd = ctx.backend.layernorm_forward(x, gamma, beta, eps)
    ctx.save_for_backward(x, gamma, mean, rstd)
    return y


def _layernorm_backward(ctx, grad_out):
    x, gamma, mean, rstd = ctx.saved
    dx, dgamma, dbeta = ctx.backend.layernorm_backward(grad_out, x, gamma, mean, rstd)
    return dx, dgamma.astype(ctx.param_dtype, copy=False), dbeta.astype(ctx.param_dtype, copy=False)


class CrossEntropy(Function):
    """Label-smoothed cross-entropy per row, with the true NLL as aux output (§5.4).

    q puts 1−ε on the gold token, 0 on padding, ε/(V−2) on every other token;
    loss = −Σ q log softmax(logits), dloss/dlogits = softmax(logits) − q.
    The kernel computes loss, NLL and the gradient in one pass over V, so
    backward only scales the saved gradient by grad_out. Padding rows give 0.
    """

    has_aux = True

    @staticmethod
    def forward(ctx, logits, *, targets, eps_ls, pad_idx):
        loss, nll, dlogits = ctx.backend.cross_entropy_forward(logits, targets, eps_ls, pad_idx)
        ctx.save_for_backward(dlogits)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_out):
        (dlogits,) = ctx.saved
        dlogits *= grad_out[:, None].astype(dlogits.dtype)  # in place: the saved array is used once, then freed
        return dlogits


class Dropout(Function):
    """y = x/(1−p) where u ≥ p, else 0 (inverted dropout, §5.4);  dx = the same mask on dy.

    u are uniform draws regenerated from `seed` in backward, so no mask is kept
    in memory between forward and backward (the draws are a function of the seed).
    """

    @staticmethod
    def forward(ctx, x, *, p, seed):
        ctx.p, ctx.seed = p, seed
        return _dropout(ctx.backend, x, p, seed)

    @staticmethod
    def backward(ctx, grad_out):
        return _dropout(ctx.backend, grad_out, ctx.p, ctx.seed)


def _dropout(backend, x, p, seed):
    """Inverted dropout of x with the mask drawn from `seed` (the identity when p = 0)."""
    if p == 0.0:
        return x
    return backend.dropout_forward(x, backend.uniform(seed, x.shape, "float32"), p)


class Attention(Function):
    """Multi-head scaled dot-product attention in one Function (§3.2.1, Eq. (1); §3.2.2).

    q (B, Tq, H·K), k (B, Tk, H·K), v (B, Tk, H·Kv) hold the H heads side by side in
    the last axis, as the projections W^Q, W^K, W^V make them. Per head:

        S = Q Kᵀ,  W = softmax(S/√d_k, mask),  D = Dropout_p(W),  O = D V        §3.2.1, Eq. (1)

    Returns Concat(O_1, ..., O_H) (B, Tq, H·Kv), and the weights W (B, H, Tq, Tk) as aux.
    Backward runs the four lines in reverse (W and the seed are all it keeps beyond q, k, v):

        dD = dO Vᵀ,  dV = Dᵀ dO,  dW = Dropout_p(dD),  dS = softmax_backward(W, dW),  dQ = dS K,  dK = dSᵀ Q

    Splitting and merging heads are views and copies inside, not graph nodes: one op each
    way instead of the composed twin's twelve (transformer.attention.scaled_dot_product_attention
    between split_heads and merge_heads, which the tests compare against).
    """

    has_aux = True

    @staticmethod
    def forward(ctx, q, k, v, *, heads, mask=None, p=0.0, seed=None):
        backend, xp = ctx.backend, ctx.backend.xp
        qh, kh, vh = (split_heads(a, heads) for a in (q, k, v))               # (B, T, H·d) -> (B, H, T, d)
        ctx.scale, ctx.p, ctx.seed = 1.0 / math.sqrt(qh.shape[-1]), p, seed
        scores = xp.matmul(qh, xp.swapaxes(kh, -1, -2))                     # (B, H, Tq, K) @ (B, H, K, Tk)
        weights = backend.softmax_forward(scores, ctx.scale, mask)           # §3.2.1, Eq. (1): softmax(QKᵀ/√d_k)
        ctx.save_for_backward(qh, kh, vh, weights)
        out = xp.matmul(_dropout(backend, weights, p, seed), vh)             # (B, H, Tq, Tk) @ (B, H, Tk, Kv)
        return merge_heads(out), weights                                     # (B, H, Tq, Kv) -> (B, Tq, H·Kv)

    @staticmethod
    def backward(ctx, grad_out):
        qh, kh, vh, weights = ctx.saved
        backend, xp = ctx.backend, ctx.backend.xp
        d_out = split_heads(grad_out, qh.shape[1])                           # (B, Tq, H·Kv) -> (B, H, Tq, Kv)
        d_dropped = xp.matmul(d_out, xp.swapaxes(vh, -1, -2))                # dD = dO Vᵀ, (B, H, Tq, Tk)
        d_weights = _dropout(backend, d_dropped, ctx.p, ctx.seed)            # dW: the same mask
        d_scores = backend.softmax_backward(weights, d_weights, ctx.scale)   # dS (the 1/√d_k included)
        need_q, need_k, need_v = ctx.needs_input_grad
        dq = merge_heads(xp.matmul(d_scores, kh)) if need_q else None                        # dQ = dS K
        dk = merge_heads(xp.matmul(xp.swapaxes(d_scores, -1, -2), qh)) if need_k else None   # dK = dSᵀ Q
        dv = None
        if need_v:
            dropped = _dropout(backend, weights, ctx.p, ctx.seed)            # D again, from W and the seed
            dv = merge_heads(xp.matmul(xp.swapaxes(dropped, -1, -2), d_out))                 # dV = Dᵀ dO
        return dq, dk, dv


def split_heads(a, heads: int):
    """(B, T, H·d) -> (B, H, T, d): head i is columns i·d ... (i+1)·d − 1 (§3.2.2). A view."""
    B, T, width = a.shape
    return a.reshape(B, T, heads, width // heads).transpose(0, 2, 1, 3)


def merge_heads(a):
    """(B, H, T, d) -> (B, T, H·d), the inverse of split_heads: Concat(head_1, ..., head_H) (§3.2.2)."""
    B, H, T, d = a.shape
    return a.transpose(0, 2, 1, 3).reshape(B, T, H * d)
