"""Dropout forward: float64 NumPy reference, a float32 NumPy twin, and every Numba version.

Size: the FFN hidden activations of the CPU Transformer benchmark (`train bench --preset cpu`): (2048, 1024)
float32 with float32 uniforms, p = 0.1 (§5.4). Bytes (napkin math): read x and u, write y, 3 * N * 4.
"""
import numpy as np

from benchmarks.common import parse_args, run_table
from minitensor.kernels.dropout_forward.numba_cpu import VERSIONS, dropout_forward
from minitensor.kernels.dropout_forward.reference import dropout_forward_ref

SHAPE, P_DROP = (2048, 1024), 0.1


def dropout_forward_numpy32(x, u, p):
    """The fair NumPy baseline: one select in float32."""
    return np.where(u >= np.float32(p), x * np.float32(1 / (1 - p)), np.float32(0))


def main():
    args = parse_args(__doc__)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    u = rng.random(SHAPE, dtype=np.float32)
    x1, u1 = x.reshape(-1), u.reshape(-1)
    candidates = [("reference", lambda: dropout_forward_ref(x, u, P_DROP), False),
                  ("numpy float32", lambda: dropout_forward_numpy32(x, u, P_DROP), False)]
    for v, kernel in VERSIONS.items():
        candidates.append((f"numba v{v}", lambda k=kernel: k(x1, u1, P_DROP, np.empty_like(x1)), True))
    candidates.append(("numba wrapper (DEFAULT)", lambda: dropout_forward(x, u, P_DROP), True))
    run_table(f"dropout_forward {SHAPE} float32", candidates, 3 * x.size * 4, args)


if __name__ == "__main__":
    main()
