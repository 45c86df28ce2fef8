"""LayerNorm forward: float64 NumPy reference, a float32 NumPy twin, and every Numba version.

Size: the CPU Transformer benchmark (`train bench --preset cpu`): N = 64 x 32 = 2048 rows, D = d_model = 256.
Bytes (napkin math): read x, write y, (2 * N * D + 2 * N) * 4 (gamma, beta stay in cache).
"""
import numpy as np

from benchmarks.common import parse_args, run_table
from minitensor.kernels.layernorm_forward.numba_cpu import VERSIONS, layernorm_forward
from minitensor.kernels.layernorm_forward.reference import layernorm_forward_ref

N, D, EPS = 2048, 256, 1e-5


def layernorm_forward_numpy32(x, gamma, beta, eps):
    """The fair NumPy baseline: same two-pass math in float32."""
    mean = x.mean(axis=-1)
    xc = x - mean[:, None]
    rstd = 1 / np.sqrt((xc * xc).mean(axis=-1) + np.float32(eps))
    return xc * rstd[:, None] * gamma + beta, mean, rstd


def main():
    args = parse_args(__doc__)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, D)).astype(np.float32)
    gamma = rng.standard_normal(D).astype(np.float32)
    beta = rng.standard_normal(D).astype(np.float32)

    def kernel_call(kernel):
        kernel(x, gamma, beta, EPS, np.empty_like(x), np.empty(N, np.float32), np.empty(N, np.float32))

    candidates = [("reference", lambda: layernorm_forward_ref(x, gamma, beta, EPS), False),
                  ("numpy float32", lambda: layernorm_forward_numpy32(x, gamma, beta, EPS), False)]
    for v, kernel in VERSIONS.items():
        candidates.append((f"numba v{v}", lambda k=kernel: kernel_call(k), True))
    candidates.append(("numba wrapper (DEFAULT)", lambda: layernorm_forward(x, gamma, beta, EPS), True))
    run_table(f"layernorm_forward ({N}, {D}) float32", candidates, (2 * N * D + 2 * N) * 4, args)


if __name__ == "__main__":
    main()
