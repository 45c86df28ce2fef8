"""LayerNorm backward: float64 NumPy reference, a float32 NumPy twin, and every Numba version.

Size: the CPU Transformer benchmark (`train bench --preset cpu`): N = 64 x 32 = 2048 rows, D = d_model = 256.
Bytes (napkin math): read dy and x, write dx, 3 * N * D * 4 (+ mean, rstd, gamma, dgamma, dbeta).
"""
import numpy as np

from benchmarks.common import parse_args, run_table
from minitensor.kernels.layernorm_backward.numba_cpu import VERSIONS, layernorm_backward
from minitensor.kernels.layernorm_backward.reference import layernorm_backward_ref

N, D = 2048, 256


def layernorm_backward_numpy32(dy, x, gamma, mean, rstd):
    """The fair NumPy baseline: same formula in float32."""
    xhat = (x - mean[:, None]) * rstd[:, None]
    g = dy * gamma
    dx = rstd[:, None] * (g - g.mean(axis=1, keepdims=True)
                          - xhat * (g * xhat).mean(axis=1, keepdims=True))
    return dx, (dy * xhat).sum(axis=0), dy.sum(axis=0)


def main():
    args = parse_args(__doc__)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, D)).astype(np.float32)
    dy = rng.standard_normal((N, D)).astype(np.float32)
    gamma = rng.standard_normal(D).astype(np.float32)
    mean = x.mean(axis=1)
    rstd = (1 / np.sqrt(x.var(axis=1) + 1e-5)).astype(np.float32)
    chunks = 8

    def kernel_call(kernel):
        kernel(dy, x, gamma, mean, rstd, chunks, np.empty_like(x), np.empty(D, np.float32),
               np.empty(D, np.float32))

    candidates = [("reference", lambda: layernorm_backward_ref(dy, x, gamma, mean, rstd), False),
                  ("numpy float32", lambda: layernorm_backward_numpy32(dy, x, gamma, mean, rstd),
                   False)]
    for v, kernel in VERSIONS.items():
        candidates.append((f"numba v{v}", lambda k=kernel: kernel_call(k), True))
    candidates.append(("numba wrapper (DEFAULT)",
                       lambda: layernorm_backward(dy, x, gamma, mean, rstd), True))
    run_table(f"layernorm_backward ({N}, {D}) float32", candidates, 3 * N * D * 4, args)


if __name__ == "__main__":
    main()
