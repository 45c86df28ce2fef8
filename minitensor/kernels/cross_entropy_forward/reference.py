"""Cross-entropy with label smoothing (§5.4), forward and dlogits, the spec: NumPy, float64 sums.

Shapes: N = rows (B*T target tokens), V = vocabulary size.
"""
import numpy as np


def smoothing_mass(eps_ls, V, pad_idx):
    """q on each non-gold, non-pad token: eps_ls/(V-2), or eps_ls/(V-1) without a pad token."""
    others = V - 1 if pad_idx is None else V - 2
    return eps_ls / others if others > 0 else 0.0


def cross_entropy_forward_ref(logits, targets, eps_ls, pad_idx):
    """Per row: loss = -sum_j q_j log p_j, nll = -log p[target], dlogits = p - q.

    q puts 1 - eps_ls on the gold token, 0 on pad_idx and smoothing_mass() elsewhere
    (§5.4, eps_ls = 0.1 in the paper). Rows whose target is pad_idx give zeros.
    Returns loss, nll (float32, float64 for float64 logits) and dlogits (logits' dtype).
    Builds q explicitly: this is the spec, the fast kernels must not.
    """
    z = np.asarray(logits, dtype=np.float64)  # (N, V)
    N, V = z.shape
    t = np.asarray(targets).astype(np.int64)  # (N,)
    shifted = z - z.max(axis=1, keepdims=True)  # (N, V), max for stability
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))  # (N, V) log-softmax
    q = np.full((N, V), smoothing_mass(eps_ls, V, pad_idx))  # (N, V)
    if pad_idx is not None:
        q[:, pad_idx] = 0.0
    q[np.arange(N), t] = 1.0 - eps_ls
    loss = -(q * logp).sum(axis=1)  # (N,)
    nll = -logp[np.arange(N), t]  # (N,)
    dlogits = np.exp(logp) - q  # (N, V)
    if pad_idx is not None:
        is_pad = t == pad_idx  # (N,)
        loss[is_pad] = 0.0
        nll[is_pad] = 0.0
        dlogits[is_pad] = 0.0
    stats = np.float64 if logits.dtype == np.float64 else np.float32
    return loss.astype(stats), nll.astype(stats), dlogits.astype(logits.dtype)
