"""Solutions to chapter 03's exercises (checked by `check_central_difference`, `check_layernorm_backward`)."""
import numpy as np


def central_difference(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """∂f/∂x_i ≈ (f(x + ε e_i) − f(x − ε e_i)) / 2ε for every element (x is restored afterwards)."""
    grad = np.zeros_like(x, dtype=np.float64)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + eps
        plus = f(x)
        x[i] = old - eps
        minus = f(x)
        x[i] = old
        grad[i] = (plus - minus) / (2 * eps)
    return grad


def layernorm_backward(dy: np.ndarray, x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """dx of y = x̂·γ + β with x̂ = (x − mean)/√(var + ε) over the last axis (biased variance).

    term 1: g = dy·γ flows through x̂ directly, scaled by rstd;
    term 2: minus its mean (every x_j moves the mean);
    term 3: minus x̂·mean(g·x̂) (every x_j moves the variance).
    """
    mean = x.mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(x.var(axis=-1, keepdims=True) + eps)
    x_hat = (x - mean) * rstd
    g = dy * gamma
    return rstd * (g - g.mean(axis=-1, keepdims=True) - x_hat * (g * x_hat).mean(axis=-1, keepdims=True))


PREDICT = """Exercise 1. With r = 1 the upstream gradient is dy = 1, so the broken backward returns y ⊙ 1 = y,
the softmax itself: positive numbers whose rows sum to 1. The true gradient of Σ softmax = 1 (a constant)
is 0, so this time the out.sum() check does catch it (y is far from 0). It is the backwards whose rows sum
to zero, like the all-zero one, that slip through r = 1; a random r catches both."""
