"""Cross-entropy forward + dlogits: float64 NumPy reference, a float32 NumPy twin, every Numba version.

Size: the CPU Transformer benchmark (issue 7): N = 64 sentences x 32 target tokens = 2048 rows,
V = 8000, label smoothing eps_ls = 0.1, pad id 0, about 10% pad rows.
Bytes (napkin math): read logits and write dlogits once, 2 * N * V * 4 (+ small per-row terms).
"""
import numpy as np

from benchmarks.common import parse_args, run_table
from minitensor.kernels.cross_entropy_forward.numba_cpu import VERSIONS, cross_entropy_forward
from minitensor.kernels.cross_entropy_forward.reference import cross_entropy_forward_ref

N, V, EPS_LS, PAD = 2048, 8000, 0.1, 0


def cross_entropy_forward_numpy32(logits, targets, eps_ls, pad_idx):
    """The fair NumPy baseline: float32, no one-hot; loss from the log-sum-exp identity."""
    rows = np.arange(logits.shape[0])
    c = np.float32(eps_ls / (logits.shape[1] - 2))
    row_max = logits.max(axis=1, keepdims=True)  # (N, 1)
    p = np.exp(logits - row_max)  # (N, V)
    total = p.sum(axis=1, keepdims=True)  # (N, 1)
    p /= total
    lse = (row_max + np.log(total))[:, 0]  # (N,)
    nll = lse - logits[rows, targets]
    others = logits.shape[1] * lse - logits.sum(axis=1) - nll - (lse - logits[:, pad_idx])
    loss = (1 - eps_ls) * nll + c * others
    p -= c
    p[rows, targets] += c - np.float32(1 - eps_ls)
    p[:, pad_idx] += c
    is_pad = targets == pad_idx
    p[is_pad] = 0
    loss[is_pad] = 0
    nll[is_pad] = 0
    return loss, nll, p


def main():
    args = parse_args(__doc__)
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal((N, V)) * 2).astype(np.float32)
    targets = rng.integers(1, V, size=N)
    targets[rng.random(N) < 0.1] = PAD
    c = EPS_LS / (V - 2)

    def kernel_call(kernel):
        loss, nll = np.empty(N, np.float32), np.empty(N, np.float32)
        kernel(logits, targets, 1 - EPS_LS, c, PAD, loss, nll, np.empty_like(logits))

    candidates = [("reference", lambda: cross_entropy_forward_ref(logits, targets, EPS_LS, PAD), False),
                  ("numpy float32", lambda: cross_entropy_forward_numpy32(logits, targets, EPS_LS, PAD),
                   False)]
    for v, kernel in VERSIONS.items():
        candidates.append((f"numba v{v}", lambda k=kernel: kernel_call(k), True))
    candidates.append(("numba wrapper (DEFAULT)",
                       lambda: cross_entropy_forward(logits, targets, EPS_LS, PAD), True))
    run_table(f"cross_entropy_forward ({N}, {V}) float32", candidates, 2 * N * V * 4, args)


if __name__ == "__main__":
    main()
