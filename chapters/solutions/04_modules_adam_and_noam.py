"""Solutions to chapter 04's exercises (checked by `check_first_adam_update`, `check_warmup_for_peak`,
`check_dropout_variance`) and the answer key PREDICT."""
import numpy as np


def first_adam_update(g, lr: float, eps: float):
    """After one step from m = v = 0: m̂ = g and v̂ = g² (bias correction divides out 1 − β exactly),
    so p₁ − p₀ = −lr · g / (|g| + ε): about lr · sign(g) whatever the gradient's scale."""
    return -lr * g / (np.abs(g) + eps)


def warmup_for_peak(d_model: int, peak_lr: float) -> int:
    """Eq. (3) peaks at step = warmup with d_model^-0.5 · warmup^-0.5, so warmup = 1 / (d_model · peak²)."""
    return round(1.0 / (d_model * peak_lr ** 2))


def dropout_variance(x: float, p: float) -> float:
    """y = x/(1−p) with probability 1−p, else 0: E[y²] = x²/(1−p), E[y]² = x², so Var y = x² p/(1−p)."""
    return x * x * p / (1.0 - p)


PREDICT = """Exercise 1. Peak = d_model^-0.5 · warmup^-0.5 = 1024^-0.5 · 4000^-0.5 = 1/(32 · 63.25) ≈ 4.94e-4,
at step 4000. The rate is half the peak twice: during warm-up at step 2000 (linear), and after it at step
16,000 (1/√step: four times the steps, half the rate)."""
