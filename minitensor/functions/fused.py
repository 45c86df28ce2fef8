"""Fused ops: one Function (one kernel call each way) for a composite formula.

Each has a composed twin in `composed.py`, built only from primitives, and
tests check values and gradients of the two against each other. The kernels
themselves come from the tensor's backend (see kernels/README.md).
"""
from __future__ import annotations

from ..autograd import Function


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
        y, mean, rstd = ctx.backend.layernorm_forward(x, gamma, beta, eps)
        ctx.save_for_backward(x, gamma, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, grad_out):
        x, gamma, mean, rstd = ctx.saved
        dx, dgamma, dbeta = ctx.backend.layernorm_backward(grad_out, x, gamma, mean, rstd)
        return dx, dgamma, dbeta


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
        return dlogits * grad_out[:, None].astype(dlogits.dtype)


class Dropout(Function):
    """y = x/(1−p) where u ≥ p, else 0 (inverted dropout, §5.4);  dx = the same mask on dy.

    u are uniform draws from `seed`, kept for backward so the mask is the same.
    """

    @staticmethod
    def forward(ctx, x, *, p, seed):
        u = ctx.backend.uniform(seed, x.shape, "float32")
        ctx.save_for_backward(u)
        ctx.p = p
        return ctx.backend.dropout_forward(x, u, p)

    @staticmethod
    def backward(ctx, grad_out):
        (u,) = ctx.saved
        return ctx.backend.dropout_forward(grad_out, u, ctx.p)
