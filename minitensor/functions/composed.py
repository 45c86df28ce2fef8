"""Composed twins of the fused ops, built only from primitive Tensor ops.

They are slower (many small ops, each saving its own intermediates) but
obviously right; tests check the fused Functions against them, values and
gradients. Chapters use them to show what a fused kernel computes.
The Transformer's own fusions have their twins in transformer/ (Eq. (1) in
attention.py, the sub-layer connection in layers.py).
"""
from __future__ import annotations


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


def smoothed_targets(xp, targets, num_classes: int, smoothing: float, ignore_index, dtype):
    """Dense (N, C) q: 1 − smoothing on the target, 0 on ignore_index, the rest spread evenly.

    Rows whose target is ignore_index are all zero (they contribute nothing).
    """
    n = targets.shape[0]
    others = num_classes - 2 if ignore_index is not None else num_classes - 1
    q = xp.full((n, num_classes), smoothing / others if others > 0 else 0.0, dtype=dtype)
    q[xp.arange(n), targets] = 1.0 - smoothing
    if ignore_index is not None:
        q[:, ignore_index] = 0.0
        q[targets == ignore_index] = 0.0
    return q


def cross_entropy_composed(logits, targets, smoothing=0.0, ignore_index=None):
    """Per-row −Σ q log softmax(logits), q from `smoothed_targets`.

    Builds q as a dense (N, C) array: exactly what the fused kernel avoids.
    """
    q = smoothed_targets(logits.backend.xp, targets, logits.shape[1], smoothing, ignore_index, logits.dtype)
    return -(log_softmax_composed(logits) * q).sum(axis=-1)
