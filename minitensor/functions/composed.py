"""Composed twins of the fused ops, built only from primitive Tensor ops.

They are slower (many small ops, each saving its own intermediates) but
obviously right; tests check the fused Functions against them, values and
gradients. Chapters use them to show what a fused kernel computes.
Attention's twin is the paper's Eq. (1) itself, in transformer/attention.py.
"""
from __future__ import annotations

from .fused import Dropout


def softmax_composed(x, axis=-1, scale=1.0, mask=None):
    """exp(z − max z) / Σ exp(z − max z) with z = scale·x, blocked entries −∞ (§3.2.1, §3.2.3)."""
    z = x * scale
    if mask is not None:
        z = z.masked_fill(mask, -1e30)          # a large negative, so exp gives exactly 0
    z = z - z.max(axis=axis, keepdims=True).detach()   # stabiliser; softmax is shift-invariant
    e = z.exp()
    if mask is not None:
        e = e.masked_fill(mask, 0.0)            # a fully blocked row sums to 0 ...
    total = e.sum(axis=axis, keepdims=True)
    if mask is not None:
        total = total + (total.data == 0)       # ... and divides by 1 instead of 0, giving zeros
    return e / total


def log_softmax_composed(x, axis=-1):
    z = x - x.max(axis=axis, keepdims=True).detach()
    return z - z.exp().sum(axis=axis, keepdims=True).log()


def layer_norm_composed(x, gamma, beta, eps):
    """(x − mean)/√(var + eps)·γ + β over the last axis, biased variance (§3.1)."""
    mean = x.mean(axis=-1, keepdims=True)
    centered = x - mean
    var = (centered * centered).mean(axis=-1, keepdims=True)
    return centered / (var + eps).sqrt() * gamma + beta


def dropout_add_layer_norm_composed(x, s, gamma, beta, eps, p, seed):
    """LayerNorm(x + Dropout(s)), the post-norm sub-layer connection (§3.1, §5.4)."""
    return layer_norm_composed(x + (s if p == 0.0 else Dropout.apply(s, p=p, seed=seed)), gamma, beta, eps)


def cross_entropy_composed(logits, targets, eps_ls, pad_idx):
    """Per-row label-smoothed cross-entropy −Σ q log p (§5.4), q as in kernels/README.md.

    Builds q as a dense (N, V) array: exactly what the fused kernel avoids.
    """
    xp = logits.backend.xp
    n, v = logits.shape
    log_p = log_softmax_composed(logits)
    others = v - 2 if pad_idx is not None else v - 1
    q = xp.full((n, v), eps_ls / others, dtype=logits.dtype)
    q[xp.arange(n), targets] = 1.0 - eps_ls
    if pad_idx is not None:
        q[:, pad_idx] = 0.0
        q[targets == pad_idx] = 0.0             # padding rows contribute nothing
    return -(log_p * q).sum(axis=-1)
