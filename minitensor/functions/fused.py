"""Fused ops: one Function (one kernel call each way) for a composite formula.

Each has a composed twin built only from primitives (`composed.py`), and tests
check values and gradients of the two against each other. The kernels come
from the tensor's backend (see kernels/README.md). These are generic tensor
ops; fusions that only make sense inside a Transformer live in transformer/fused.py.
"""
from __future__ import annotations

from ..autograd import Function


class Linear(Function):
    """y = x W + b over the last axis, computed in x's dtype.

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
        return y.reshape(x.shape[:-1] + (w.shape[1],))         # (R, out) -> (..., out)

    @staticmethod
    def backward(ctx, grad_out):
        rows, w = ctx.saved
        xp, w_dtype = ctx.backend.xp, ctx.input_dtypes[1]
        g = grad_out.reshape(-1, grad_out.shape[-1])           # (..., out) -> (R, out)
        dx = xp.matmul(g, w.T).reshape(ctx.input_shapes[0]) if ctx.needs_input_grad[0] else None
        dw = xp.matmul(rows.T, g).astype(w_dtype, copy=False) if ctx.needs_input_grad[1] else None
        if len(ctx.needs_input_grad) == 2:
            return dx, dw
        db = None
        if ctx.needs_input_grad[2]:
            # db = 1ᵀ dy as one matrix-vector product (BLAS / cuBLAS), accumulated in float32 at least.
            # Not g.sum(axis=0): CuPy reduces the leading axis of a (rows, out) array with a few
            # thousand threads striding down the columns, ~1 ms per call at Transformer-base sizes.
            acc = xp.promote_types(g.dtype, xp.float32)
            db = xp.matmul(xp.ones(g.shape[0], dtype=acc), g.astype(acc, copy=False)).astype(w_dtype, copy=False)
        return dx, dw, db


class Softmax(Function):
    """y = softmax(scale·x) over the last axis, blocked entries (mask True) get weight 0.

    Attention uses it with scale = 1/√d_k and −∞ on illegal connections (§3.2.1, Eq. (1);
    §3.2.3). dy/dx: dx = scale · y ⊙ (dy − Σ dy⊙y).
    """

    @staticmethod
    def forward(ctx, x, *, scale=1.0, mask=None):
        y = ctx.backend.softmax_forward(x, scale, mask)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_out):
        (y,) = ctx.saved
        return ctx.backend.softmax_backward(y, grad_out, ctx.params["scale"])


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
    """y = (x − mean)/√(var + eps) · γ + β over the last axis (biased variance).

    γ, β may be float32 masters under float16 activations: they are cast to x's dtype for the
    kernel and their gradients come back in their own dtype. Backward (term by term in the kernel):
    dx = rstd·(g − mean(g) − x̂·mean(g⊙x̂)) with g = dy⊙γ, dγ = Σ dy⊙x̂, dβ = Σ dy.
    """

    @staticmethod
    def forward(ctx, x, gamma, beta, *, eps):
        return layer_norm_forward(ctx, x, gamma, beta, eps)

    @staticmethod
    def backward(ctx, grad_out):
        return layer_norm_backward(ctx, grad_out, param_dtype=ctx.input_dtypes[1])


def layer_norm_forward(ctx, x, gamma, beta, eps):
    """LayerNorm's forward inside any Function that normalises (γ, β cast to x's dtype); saves for the backward."""
    gamma, beta = gamma.astype(x.dtype, copy=False), beta.astype(x.dtype, copy=False)
    y, mean, rstd = ctx.backend.layernorm_forward(x, gamma, beta, eps)
    ctx.save_for_backward(x, gamma, mean, rstd)
    return y


def layer_norm_backward(ctx, grad_out, param_dtype):
    """(dx, dγ, dβ) for a forward done by layer_norm_forward; dγ, dβ in the parameters' own dtype."""
    x, gamma, mean, rstd = ctx.saved
    dx, dgamma, dbeta = ctx.backend.layernorm_backward(grad_out, x, gamma, mean, rstd)
    return dx, dgamma.astype(param_dtype, copy=False), dbeta.astype(param_dtype, copy=False)


class CrossEntropy(Function):
    """Cross-entropy per row against a smoothed target q, with the plain NLL as aux output.

    q puts 1 − smoothing on the target class, 0 on `ignore_index`, and spreads `smoothing`
    evenly over the other classes (the Transformer's label smoothing, §5.4);
    loss = −Σ q log softmax(logits), dloss/dlogits = softmax(logits) − q. Rows whose target
    is `ignore_index` give 0. The kernel computes loss, NLL and the gradient in one pass
    over the classes, so backward only scales the saved gradient by grad_out.
    """

    has_aux = True

    @staticmethod
    def forward(ctx, logits, *, targets, smoothing=0.0, ignore_index=None):
        loss, nll, dlogits = ctx.backend.cross_entropy_forward(logits, targets, smoothing, ignore_index)
        ctx.save_for_backward(dlogits)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_out):
        (dlogits,) = ctx.saved
        dlogits *= grad_out[:, None].astype(dlogits.dtype)  # in place: the saved array is used once, then freed
        return dlogits


class Dropout(Function):
    """y = x/(1−p) where u ≥ p, else 0 (inverted dropout);  dx = the same mask on dy.

    u are uniform draws regenerated from `seed` in backward, so no mask is kept
    in memory between forward and backward (the draws are a function of the seed).
    """

    @staticmethod
    def forward(ctx, x, *, p, seed):
        return inverted_dropout(ctx.backend, x, p, seed)

    @staticmethod
    def backward(ctx, grad_out):
        return inverted_dropout(ctx.backend, grad_out, ctx.params["p"], ctx.params["seed"])


def inverted_dropout(backend, x, p, seed):
    """The array x/(1−p) where u ≥ p, else 0, with u drawn from `seed` (x itself when p = 0).

    For Functions that drop inside (Dropout, and fused ops built on it): the same seed
    gives the same mask, in forward and in backward.
    """
    if p == 0.0:
        return x
    return backend.dropout_forward(x, backend.uniform(seed, x.shape, "float32"), p)
