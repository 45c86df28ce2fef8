"""Cross-entropy with label smoothing, forward and dlogits, the spec: NumPy, float64 sums.

The Transformer trains with it for §5.4 label smoothing (smoothing = 0.1, padding ignored).
Shapes: N = rows, V = number of classes.
"""
import numpy as np

from ..bf16_cast.reference import as_float64, from_float64


def smoothing_mass(smoothing, V, ignore_index):
    """q on each class that is neither the target nor ignore_index: smoothing/(V-2), or
    smoothing/(V-1) when ignore_index is None."""
    others = V - 1 if ignore_index is None else V - 2
    return smoothing / others if others > 0 else 0.0


def cross_entropy_forward_ref(logits, targets, smoothing, ignore_index):
    """Per row: loss = -sum_j q_j log p_j, nll = -log p[target], dlogits = p - q.

    q puts 1 - smoothing on the target, 0 on ignore_index and smoothing_mass() elsewhere.
    Rows whose target is ignore_index give zeros (ignore_index None: no class is ignored).
    Returns loss, nll (float32, float64 for float64 logits) and dlogits (logits' dtype; bf16 logits
    as uint16 bits work too). A target outside [0, V) that is not ignore_index: IndexError.
    Builds q explicitly: this is the spec, the fast kernels must not.
    """
    z = as_float64(logits)  # (N, V)
    N, V = z.shape
    t = np.asarray(targets).astype(np.int64)  # (N,)
    check_targets(t, V, ignore_index)
    shifted = z - z.max(axis=1, keepdims=True)  # (N, V), max for stability
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))  # (N, V) log-softmax
    q = np.full((N, V), smoothing_mass(smoothing, V, ignore_index))  # (N, V)
    if ignore_index is not None:
        q[:, ignore_index] = 0.0
    q[np.arange(N), t] = 1.0 - smoothing
    loss = -(q * logp).sum(axis=1)  # (N,)
    nll = -logp[np.arange(N), t]  # (N,)
    dlogits = np.exp(logp) - q  # (N, V)
    if ignore_index is not None:
        is_ignored = t == ignore_index  # (N,)
        loss[is_ignored] = 0.0
        nll[is_ignored] = 0.0
        dlogits[is_ignored] = 0.0
    stats = np.float64 if logits.dtype == np.float64 else np.float32
    return loss.astype(stats), nll.astype(stats), from_float64(dlogits, logits.dtype)


def check_targets(targets, V, ignore_index):
    """IndexError unless every target that is not ignore_index lies in [0, V). (The GPU kernels,
    which cannot raise, give such a row NaN loss and NaN dlogits and read nothing out of range.)"""
    kept = targets if ignore_index is None else targets[targets != ignore_index]
    if kept.size and (kept.min() < 0 or kept.max() >= V):
        raise IndexError(f"cross_entropy_forward: target {int(kept.min() if kept.min() < 0 else kept.max())} "
                         f"outside the {V} classes [0, {V})")
