"""Fused ops: one Function (one kernel call each way) for a composite formula.

Each has a composed twin in `composed.py`, built only from primitives, and
tests check values and gradients of the two against each other. The kernels
themselves come from the tensor's backend (see kernels/README.md).
"""
from __future__ import annotations

from ..autograd import Function


class Linear(Function):
    """y = x W + b over the last axis (§3.3, Eq. (2): xW₁ + b₁), computed in x's dtype.

    One Function instead of cast + matmul + expand + add: a Transformer step has
    ~100 of these, and on a GPU each avoided op is a launch and a Python call
    saved. Rows of x are flattened so each product is a single GEMM.
    dx = dy Wᵀ, dW = xᵀ dy, db = Σ_rows dy; dW and db come back in the dtype of
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
        acc = xp.promote_types(g.dtype, xp.float32)              # fp16 rows are summed in float32
        db = g.sum(axis=0, dtype=acc).astype(ctx.w_dtype, copy=False) if ctx.needs_input_grad[2] else None
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
        ctx.param_dtype = gamma.dtype                         # float32 masters under float16 activations
        gamma, beta = gamma.astype(x.dtype, copy=False), beta.astype(x.dtype, copy=False)
        y, mean, rstd = ctx.backend.layernorm_forward(x, gamma, beta, eps)
        ctx.save_for_backward(x, gamma, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, grad_out):
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
        return ctx.backend.dropout_forward(x, ctx.backend.uniform(seed, x.shape, "float32"), p)

    @staticmethod
    def backward(ctx, grad_out):
        u = ctx.backend.uniform(ctx.seed, grad_out.shape, "float32")
        return ctx.backend.dropout_forward(grad_out, u, ctx.p)
