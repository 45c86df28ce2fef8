"""Fused ops: one Function (one kernel call each way) for a composite formula.

Each has a composed twin built only from primitives (`composed.py`), and tests
check values and gradients of the two against each other. The kernels come
from the tensor's backend (see kernels/README.md). These are generic tensor
ops; fusions that only make sense inside a Transformer live in transformer/fused.py.
"""
from __future__ import annotations

from ..autograd import Function, is_grad_enabled


class Linear(Function):
    """y = x W + b over the last axis, computed in x's dtype.

    One Function instead of cast + matmul + expand + add: a Transformer step has
    ~100 of these, and on a GPU each avoided op is a launch and a Python call
    saved. Rows of x are flattened so each product is a single GEMM.
    dx = dy Wᵀ, dW = xᵀ dy, db = Σ_rows dy (the bias_backward kernel: a column sum); dW and db are
    accumulated in float32 at least and written in the dtype of the (float32 master) weights, with
    no cast after. `half`: the optimizer's copies of (W, b) in x's dtype (Parameter.half), so mixed
    precision casts nothing here; None casts W and b (a no-op when they already have x's dtype).
    Composed twin: `x @ W + b`.
    """

    @staticmethod
    def forward(ctx, x, weight, *bias, half=None):
        rows, w, half_bias = _rows_and_weights(ctx, x, (weight, *bias), half)
        y = ctx.backend.matmul(rows, w[0], bias=half_bias[0] if bias else None)   # (R, in) @ (in, out) + (out,)
        ctx.save_for_backward(rows, w[0])
        return y.reshape(x.shape[:-1] + (y.shape[-1],))        # (R, out) -> (..., out)

    @staticmethod
    def backward(ctx, grad_out):
        rows, w = ctx.saved
        g = grad_out.reshape(-1, grad_out.shape[-1])           # (..., out) -> (R, out)
        needs = ctx.needs_input_grad
        dx, dw, db = _linear_backward(ctx, rows, w, g, with_bias=len(needs) == 3 and needs[2])  # a frozen b: no db
        return (dx, dw, db) if len(needs) == 3 else (dx, dw)


class LinearReLU(Function):
    """y = max(0, x W + b) over the last axis (§3.3, Eq. (2)'s inner layer), computed in x's dtype.

    The product is one GEMM; the bias and the ReLU are one pass over its output, in place (the
    bias_relu_forward kernel). Backward: the bias_backward kernel masks dy where y = 0 and sums
    the columns (dh and db in one pass), then dx = dh Wᵀ and dW = xᵀ dh. Saves x, W and y.
    `half` as in Linear. Composed twin: `(x @ W + b).relu()`.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, *, half=None):
        rows, w, b = _rows_and_weights(ctx, x, (weight, bias), half)
        y = ctx.backend.bias_relu_forward(ctx.backend.matmul(rows, w[0]), b[0])   # (R, in) @ (in, out), in place
        ctx.save_for_backward(rows, w[0], y)
        return y.reshape(x.shape[:-1] + (y.shape[-1],))

    @staticmethod
    def backward(ctx, grad_out):
        rows, w, y = ctx.saved
        g = grad_out.reshape(-1, grad_out.shape[-1])
        return _linear_backward(ctx, rows, w, g, with_bias=True, relu_out=y)


class StackedLinear(Function):
    """y[s] = x W_s + b_s for s = 1..n: n Linear layers of one input as one batched product.

    Inputs: x (..., in), W_1..W_n (in, out), then b_1..b_n (out,) or no biases; returns
    (n, ..., out). §3.2.2's projections of one input (Q, K, V of the same tokens, or K, V of the
    memory) are such a group. The weights are read as one (n, in, out) array, a view when they lie
    equally spaced in one buffer, as the optimizer's flat buffers keep them (Backend.stacked).
    Backward: dW = xᵀ dy (one batched product), db = Σ_rows dy (one column-sum kernel), and
    dx = Σ_s dy_s W_sᵀ (n products, each after the first adding into the same dx: beta = 1).
    `half` as in Linear. Composed twin: `stack([x @ W_s + b_s for s])`.
    """

    @staticmethod
    def forward(ctx, x, *params, half=None):
        backend = ctx.backend
        rows, w, b = _rows_and_weights(ctx, x, params, half)
        w = backend.stacked(w)                                  # (n, in, out)
        y = backend.xp.empty((w.shape[0], rows.shape[0], w.shape[2]), dtype=x.dtype)
        if b:
            y[...] = backend.stacked(b)[:, None, :]            # each slot starts as its bias ...
        backend.matmul(rows, w, out=y, accumulate=bool(b))      # ... and gets (R, in) @ (n, in, out) added
        ctx.save_for_backward(rows, w)
        return y.reshape((w.shape[0],) + x.shape[:-1] + (w.shape[2],))

    @staticmethod
    def backward(ctx, grad_out):
        rows, w = ctx.saved
        n = w.shape[0]
        g = grad_out.reshape(n, -1, grad_out.shape[-1])        # (n, ..., out) -> (n, R, out)
        needs, biased = ctx.needs_input_grad, len(ctx.needs_input_grad) == 1 + 2 * n
        dx, dw, db = _linear_backward(ctx, rows, w, g, with_bias=biased and any(needs[1 + n:]))
        dws = (None,) * n if dw is None else dw                 # frozen weights or biases: None each
        dbs = () if not biased else (None,) * n if db is None else db
        return (dx, *dws, *dbs)


def _rows_and_weights(ctx, x, params, half):
    """(x as rows (R, in), the weights (2-d params) and the biases in x's dtype, each a tuple)."""
    if half is None:
        half = tuple(ctx.backend.cast(p, x.dtype) for p in params)
    weights = tuple(p for p in half if p.ndim == 2)
    return x.reshape(-1, x.shape[-1]), weights, half[len(weights):]   # (..., in) -> (R, in)


def _linear_backward(ctx, rows, w, g, with_bias, relu_out=None):
    """(dx, dW, db) of rows (R, in) @ w (in, out) or (n, in, out) [+ b] [ReLU], given g (R, out) or (n, R, out).

    dW and db come in the masters' dtype (ctx.input_dtypes[1]); stacked weights give n of each
    (views of one array); None where no gradient is needed.
    """
    backend, w_dtype, needs = ctx.backend, ctx.input_dtypes[1], ctx.needs_input_grad
    n = w.shape[0] if w.ndim == 3 else 1                       # weights: inputs 1..n
    db = None
    if with_bias or relu_out is not None:
        g, db = backend.bias_backward(g, relu_out, w_dtype)    # relu_out: dh = dy where y > 0; db = Σ_rows dh
    dx = None
    if needs[0]:
        slots = [(g, w)] if w.ndim == 2 else list(zip(g, w))   # dx = Σ_s dy_s W_sᵀ
        dx = backend.matmul(slots[0][0], slots[0][1].T)
        for g_s, w_s in slots[1:]:
            backend.matmul(g_s, w_s.T, out=dx, accumulate=True)
        dx = dx.reshape(ctx.input_shapes[0])
    dw = backend.matmul(rows.T, g, out_dtype=w_dtype) if any(needs[1:1 + n]) else None   # (in, R) @ (.., R, out)
    if w.ndim == 3:                                            # stacked: one view per weight
        return dx, None if dw is None else tuple(dw), None if db is None else tuple(db)
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
        y, mean, rstd = ctx.backend.layernorm_forward(x, gamma, beta, eps)
        ctx.save_for_backward(x, gamma, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, grad_out):
        x, gamma, mean, rstd = ctx.saved
        return ctx.backend.layernorm_backward(grad_out, x, gamma, mean, rstd)   # dγ, dβ in the parameters' dtype


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


class LinearCrossEntropy(Function):
    """CrossEntropy(x wᵀ) without the (N, V) logits: the output projection (§3.4) and the smoothed loss
    (§5.4) of ROWS rows at a time, each block's logits and their gradient made and used while in cache.

    Inputs: x (N, D), w (V, D) (the tied embedding E: logits = x Eᵀ). Returns the per-row loss (N,),
    with the plain NLL (N,) as aux, as CrossEntropy does. The gradient of Σ loss is linear in the
    block's dlogits = softmax − q, so forward makes it at once: dx = dlogits w, dw = Σ_blocks dlogitsᵀ x.
    Backward scales them by grad_out: dx row by row; dw by one number when grad_out is the same on
    every row with a loss (a mean over tokens), and otherwise by running the blocks again with each
    row's dlogits scaled. Composed twin: `CrossEntropy(Linear(x, wᵀ))`; on a CPU the blocks save the
    passes a 32 MB logits array and its gradient make through memory (Multi30k: 2,048 rows × 4,000).
    """

    has_aux = True
    ROWS = 256  # a block's logits (ROWS, V) stay in L2 for V up to ~2,000, in L3 beyond

    @staticmethod
    def forward(ctx, x, w, *, targets, smoothing=0.0, ignore_index=None):
        grads = is_grad_enabled() and any(ctx.needs_input_grad)            # not under no_grad (validation)
        loss, nll, dx, dw = _projected_cross_entropy(ctx.backend, x, w, targets, smoothing, ignore_index, grads=grads)
        ctx.save_for_backward(x, w, dx, dw)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_out):
        x, w, dx, dw = ctx.saved
        backend, params = ctx.backend, ctx.params
        targets, ignore = params["targets"], params["ignore_index"]
        scored = grad_out if ignore is None else grad_out[targets != ignore]   # rows with a loss
        if scored.size and bool((scored == scored[0]).all()):
            backend.scale(dw, scored[0].reshape(1, 1))
        else:                                                                  # rows weighted apart: again
            dw = _projected_cross_entropy(backend, x, w, targets, params["smoothing"], ignore, grad_out)[3]
        return backend.scale(dx, grad_out[:, None]), dw


def _projected_cross_entropy(backend, x, w, targets, smoothing, ignore_index, row_scale=None, grads=True):
    """(loss, nll, dx, dw) of CrossEntropy(x wᵀ) in blocks of LinearCrossEntropy.ROWS rows; row_scale
    (N,) multiplies each row's dlogits before the products (None: 1); grads False: dx, dw None."""
    xp, n = backend.xp, x.shape[0]
    loss, nll = xp.empty(n, dtype=x.dtype), xp.empty(n, dtype=x.dtype)
    dx, dw = (xp.empty_like(x), xp.zeros_like(w)) if grads else (None, None)
    for start in range(0, n, LinearCrossEntropy.ROWS):
        rows = slice(start, start + LinearCrossEntropy.ROWS)
        logits = backend.matmul(x[rows], w.T)                                  # §3.4: x Eᵀ, (R, D) @ (D, V)
        loss[rows], nll[rows], dlogits = backend.cross_entropy_forward(logits, targets[rows], smoothing,
                                                                       ignore_index)   # §5.4
        if not grads:
            continue
        if row_scale is not None:
            backend.scale(dlogits, row_scale[rows, None])
        backend.matmul(dlogits, w, out=dx[rows])                               # dx = dlogits E
        backend.matmul(dlogits.T, x[rows], out=dw, accumulate=True)            # dE += dlogitsᵀ x
    return loss, nll, dx, dw


class Dropout(Function):
    """y = x/(1−p) where u ≥ p, else 0 (inverted dropout);  dx = the same mask on dy.

    u are uniform draws regenerated from `seed` in backward, so no mask is kept
    in memory between forward and backward (the draws are a function of the seed).
    time_major: x is (T, B, ...), masked as its (B, T, ...) transpose would be (Backend.dropout).
    """

    @staticmethod
    def forward(ctx, x, *, p, seed, time_major=False):
        return inverted_dropout(ctx.backend, x, p, seed, time_major)

    @staticmethod
    def backward(ctx, grad_out):
        return inverted_dropout(ctx.backend, grad_out, ctx.params["p"], ctx.params["seed"], ctx.params["time_major"])


def inverted_dropout(backend, x, p, seed, time_major=False):
    """The array x/(1−p) where u ≥ p, else 0, with u drawn from `seed` (x itself when p = 0).

    For Functions that drop inside (Dropout, and fused ops built on it): the same seed
    gives the same mask, in forward and in backward.
    """
    if p == 0.0:
        return x
    return backend.dropout(x, p, seed, time_major)
