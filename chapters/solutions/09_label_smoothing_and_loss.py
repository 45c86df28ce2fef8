"""Solutions to chapter 09's exercises (checked by `check_uniform_smoothed_loss`, `check_uniform_min_loss`)
and the answer key PREDICT."""
import numpy as np


def uniform_smoothed_loss(logits, targets, eps, pad):
    """q_j = ε/V for every j, plus 1 − ε on gold. With Σ_j q_j = 1 and log p_j = z_j − lse:
    −Σ_j q_j log p_j = lse − (1 − ε) z_gold − (ε/V) Σ_j z_j. Mean over non-pad target tokens."""
    V = logits.shape[-1]
    z = np.asarray(logits, dtype=np.float64).reshape(-1, V)
    t = np.asarray(targets).reshape(-1)
    m = z.max(axis=1)
    lse = m + np.log(np.exp(z - m[:, None]).sum(axis=1))
    rows = lse - (1 - eps) * z[np.arange(len(t)), t] - eps / V * z.sum(axis=1)
    keep = t != pad
    return rows[keep].sum() / keep.sum()


def uniform_min_loss(eps, V):
    """Cross-entropy −Σ q log p is smallest at p = q, where it is H(q):
    gold has q = 1 − ε + ε/V, the other V − 1 tokens ε/V each."""
    gold, other = 1 - eps + eps / V, eps / V
    return float(-gold * np.log(gold) - (V - 1) * other * np.log(other))


PREDICT = """Exercise 1. The minimum is at p = q, where the loss is H(q) = −0.9 ln 0.9 − 0.1 ln(0.1/36998)
(gold 0.9; 0.1 spread over V − 2 = 36,998 tokens; padding 0) = 0.0948 + 0.1 · (ln 36998 + ln 10)
= 0.0948 + 1.2821 ≈ 1.377 nats per token. A model that matched the smoothed targets perfectly would still
report 1.38 as its training loss, which is why the training chapters log the true NLL for perplexity."""
