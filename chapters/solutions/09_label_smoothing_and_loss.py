"""Solutions to chapter 09's exercises (checked by `check_smoothed_loss`, `check_optimal_margin`)."""
import numpy as np


def smoothed_loss(logits, targets, eps, pad):
    """§5.4 label-smoothed loss by the closed form, mean over non-pad tokens:
    lse − (1−ε) z_gold − ε/(V−2) (Σ_j z_j − z_gold − z_pad)."""
    V = logits.shape[-1]
    z = np.asarray(logits, dtype=np.float64).reshape(-1, V)
    t = np.asarray(targets).reshape(-1)
    m = z.max(axis=1)
    lse = m + np.log(np.exp(z - m[:, None]).sum(axis=1))
    gold = z[np.arange(len(t)), t]
    per_row = lse - (1 - eps) * gold - eps / (V - 2) * (z.sum(axis=1) - gold - z[:, pad])
    keep = t != pad
    return per_row[keep].sum() / keep.sum()


def optimal_margin(eps, V):
    """Gap m = z_gold − z_other where p = q: p_gold/p_other = e^m must equal q_gold/q_other = (1−ε)(V−2)/ε."""
    return float(np.log((1 - eps) * (V - 2) / eps))
