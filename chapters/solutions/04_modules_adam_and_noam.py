"""Solutions to chapter 04's exercises (checked by `check_noam_lr`, `check_adam_step`)."""
import numpy as np


def noam_lr(step: int, d_model: int, warmup: int) -> float:
    """§5.3, Eq. (3): d_model^-0.5 · min(step^-0.5, step · warmup^-1.5), with step_num starting at 1."""
    step = max(step, 1)
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def adam_step(p, g, m, v, step: int, lr: float, beta1: float, beta2: float, eps: float):
    """One bias-corrected Adam step; returns the new (p, m, v)."""
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    m_hat = m / (1 - beta1 ** step)
    v_hat = v / (1 - beta2 ** step)
    return p - lr * m_hat / (np.sqrt(v_hat) + eps), m, v
