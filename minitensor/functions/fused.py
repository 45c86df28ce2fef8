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
    dx = dy Wᵀ, dW = xᵀ dy, db = Σ_rows dy = 1ᵀ dy; dW and db are accumulated in float32 at
    least and written in the dtype of the (float32 master) weights, with no cast after.
    `half`: the optimizer's copies of (W, b) in x's dtype (Parameter.half), so mixed precision
    casts nothing here; None casts W and b (a no-op when they already have x's dtype).
    Composed twin: `x @ W + b`.
    """

    @staticmethod
    def forward(ctx, x, weight, *bias, half=None):
        backend = ctx.backend
        if half is None:
            half = tuple(backend.cast(p, x.dtype) for p in (weight, *bias))
        w = half[0]
        rows = x.reshape(-1, x.shape[-1])                      # (..., in) -> (R, in)
        y = backend.matmul(rows, w, bias=half[1] if bias else None)   # (R, in) @ (in, out) + (out,)
        ctx.save_for_backward(rows, w)
        return y.reshape(x.shape[:-1] + (w.shape[1],))         # (R, out) -> (..., out)

    @staticmethod
    def backward(ctx, grad_out):
        rows, w = ctx.saved
        backend, w_dtype = ctx.backend, ctx.input_dtypes[1]
        g = grad_out.reshape(-1, grad_out.shape[-1])           # (..., out) -> (R, out)
        dx = backend.matmul(g, w.T).reshape(ctx.input_shapes[0]) if ctx.needs_input_grad[0] else None
        dw = backend.matmul(rows.T, g, out_dtype=w_dtype) if ctx.needs_input_grad[1] else None
        if len(ctx.needs_input_grad) == 2:
            return dx, dw
        db = None
        if ctx.needs_input_grad[2]:
            # db = 1ᵀ dy as one matrix product (BLAS / cuBLAS) with a cached vector of ones.
            # Not g.sum(axis=0): CuPy reduces the leading axis of a (rows, out) array with a few
            # thousand threads striding down the columns, ~1 ms per call at Transformer-base sizes.
            ones = backend.ones(g.shape[0], g.dtype).reshape(1, -1)           # (1, R)
            db = backend.matmul(ones, g, out_dtype=w_dtype).reshape(-1)       # (1, R) @ (R, out) -> (out,)
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

    γ, β may be float32 masters under half-precision activations: the kernels read them as they
    are (their statistics are float32 anyway) and return dγ, dβ summed and written in float32,
    so nothing is cast either way. Backward (term by term in the kernel):
    dx = rstd·(g − mean(g) − x̂·mean(g⊙x̂)) with g = dy⊙γ, dγ = Σ dy⊙x̂, dβ = Σ dy.
    """

    @staticmethod
    def forward(ctx, x, gamma, beta, *, eps):
        return layer_norm_forward(ctx, x, gamma, beta, eps)

    @staticmethod
    def backward(ctx, grad_out):
        return layer_norm_backward(ctx, grad_out)


def layer_norm_forward(ctx, x, gamma, beta, eps):
    """LayerNorm's forward inside any Function that normalises; saves what the backward needs."""
    y, mean, rstd = ctx.backend.layernorm_forward(x, gamma, beta, eps)
    ctx.save_for_backward(x, gamma, mean, rstd)
    return y


def layer_norm_backward(ctx, grad_out):
    """(dx, dγ, dβ) for a forward done by layer_norm_forward; dγ, dβ in the parameters' own dtype."""
    x, gamma, mean, rstd = ctx.saved
    return ctx.backend.layernorm_backward(grad_out, x, gamma, mean, rstd)


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
        return ctx.backend.scale(dlogits, grad_out[:, None])  # in place: the saved array is used once, then freed


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
    return backend.dropout(x, p, seed)
