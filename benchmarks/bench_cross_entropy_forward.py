"""Cross-entropy forward + dlogits: float64 NumPy reference, a float32 NumPy twin, every Numba version.

Sizes: the CPU Transformer benchmark (`train bench --preset cpu`): N = 64 sentences x 32 target tokens = 2048 rows,
V = 8000; the Multi30k CPU preset (`--preset multi30k_cpu`): 2048 rows, V = 4000. Smoothing = 0.1,
ignore_index = 0 (the pad id), about 10% ignored (padding) rows.
Bytes (napkin math): read logits and write dlogits once, 2 * N * V * 4 (+ small per-row terms).
"""
import numpy as np

from benchmarks.common import parse_args, run_table
from minitensor.kernels.cross_entropy_forward.numba_cpu import VERSIONS, cross_entropy_forward
from minitensor.kernels.cross_entropy_forward.reference import cross_entropy_forward_ref

SIZES = [(2048, 8000), (2048, 4000)]  # (N, V)
SMOOTHING, IGNORE_INDEX = 0.1, 0


def cross_entropy_forward_numpy32(logits, targets, smoothing, ignore_index):
    """The fair NumPy baseline: float32, no one-hot; loss from the log-sum-exp identity."""
    rows = np.arange(logits.shape[0])
    c = np.float32(smoothing / (logits.shape[1] - 2))
    row_max = logits.max(axis=1, keepdims=True)  # (N, 1)
    p = np.exp(logits - row_max)  # (N, V)
    total = p.sum(axis=1, keepdims=True)  # (N, 1)
    p /= total
    lse = (row_max + np.log(total))[:, 0]  # (N,)
    nll = lse - logits[rows, targets]
    others = logits.shape[1] * lse - logits.sum(axis=1) - nll - (lse - logits[:, ignore_index])
    loss = (1 - smoothing) * nll + c * others
    p -= c
    p[rows, targets] += c - np.float32(1 - smoothing)
    p[:, ignore_index] += c
    is_ignored = targets == ignore_index
    p[is_ignored] = 0
    loss[is_ignored] = 0
    nll[is_ignored] = 0
    return loss, nll, p


def main():
    args = parse_args(__doc__)
    for N, V in SIZES:
        table(N, V, args)


def table(N, V, args):
    """One table: every candidate on (N, V) float32 logits."""
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal((N, V)) * 2).astype(np.float32)
    targets = rng.integers(1, V, size=N)
    targets[rng.random(N) < 0.1] = IGNORE_INDEX
    c = SMOOTHING / (V - 2)

    def kernel_call(kernel):
        loss, nll = np.empty(N, np.float32), np.empty(N, np.float32)
        kernel(logits, targets, 1 - SMOOTHING, c, IGNORE_INDEX, loss, nll, np.empty_like(logits))

    call = (logits, targets, SMOOTHING, IGNORE_INDEX)
    candidates = [("reference", lambda: cross_entropy_forward_ref(*call), False),
                  ("numpy float32", lambda: cross_entropy_forward_numpy32(*call), False)]
    for v, kernel in VERSIONS.items():
        candidates.append((f"numba v{v}", lambda k=kernel: kernel_call(k), True))
    candidates.append(("numba wrapper (DEFAULT)",
                       lambda: cross_entropy_forward(*call), True))
    run_table(f"cross_entropy_forward ({N}, {V}) float32", candidates, 2 * N * V * 4, args)


if __name__ == "__main__":
    main()
