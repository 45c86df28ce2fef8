"""Solutions to chapter 08's exercises (checked by `check_rms_norm_backward`, `check_is_post_norm`)
and the answer key PREDICT."""
import numpy as np

import minitensor as mt


def rms_norm_backward(dy, x, gamma, eps):
    """dx of y = γ ⊙ x·r with r = 1/√(mean(x²) + ε) over the last axis.

    ∂r/∂x_i = −r² x̂_i / D with x̂ = x·r, so ∂x̂_j/∂x_i = r(δ_ij − x̂_j x̂_i / D) and, with g = dy ⊙ γ,
    dx = r · (g − x̂ ⊙ mean(g ⊙ x̂)): LayerNorm's formula without the mean term.
    """
    r = 1.0 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)
    x_hat, g = x * r, dy * gamma
    return r * (g - x_hat * (g * x_hat).mean(axis=-1, keepdims=True))


def is_post_norm(connection, d_model: int) -> bool:
    """Two probes. (1) Sublayer(y) = 2y: only a connection that normalises *after* the sum returns rows
    of mean 0 and variance 1 (x + LayerNorm(·) and pre-norm add un-normalised x back). (2) Sublayer(y) = 0:
    with the residual the output is LayerNorm(x), not zero; without it, LayerNorm(0) = 0."""
    x = mt.tensor(np.random.default_rng(0).standard_normal((2, 5, d_model)) * 4 + 1)
    doubled, _ = connection(x, lambda y: (y * 2.0, None))
    rows = doubled.numpy().astype(np.float64)
    normalised = np.allclose(rows.mean(axis=-1), 0, atol=1e-4) and np.allclose(rows.var(axis=-1), 1, atol=1e-3)
    zeroed, _ = connection(x, lambda y: (y * 0.0, None))
    keeps_residual = np.abs(zeroed.numpy()).max() > 0.5
    return bool(normalised and keeps_residual)


PREDICT = """Exercise 1. Post-norm: √D ≈ 4.0 for D = 16, as for inputs of scale 1: every sub-layer output is
LayerNorm'd, so the input's scale is forgotten after the first sub-layer. Pre-norm: about 100·‖x‖ ≈ 100 × 12.2 ≈ 1,220,
the input itself: it rides the residual stream untouched, and each sub-layer adds only an O(√D) vector
computed from the *normalised* stream, tiny next to it (the stack's final LayerNorm rescales at the end)."""
