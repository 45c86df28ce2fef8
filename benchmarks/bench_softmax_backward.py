"""Softmax backward: float64 NumPy reference, a float32 NumPy twin, and every Numba version.

Size: attention probabilities of the CPU Transformer benchmark (`train bench --preset cpu`): (B, H, T, S) =
(64, 4, 32, 32) float32. Bytes (napkin math): read y and dy, write dx, 3 * B*H*T*S * 4.
"""
import numpy as np

from benchmarks.common import parse_args, run_table
from minitensor.kernels.softmax_backward.numba_cpu import VERSIONS, softmax_backward
from minitensor.kernels.softmax_backward.reference import softmax_backward_ref

SHAPE = (64, 4, 32, 32)


def softmax_backward_numpy32(y, dy, scale):
    """The fair NumPy baseline: same formula in float32."""
    dot = (dy * y).sum(axis=-1, keepdims=True)
    return np.float32(scale) * y * (dy - dot)


def main():
    args = parse_args(__doc__)
    rng = np.random.default_rng(0)
    y = rng.random(SHAPE).astype(np.float32)
    y /= y.sum(axis=-1, keepdims=True)
    dy = rng.standard_normal(SHAPE).astype(np.float32)
    scale = 0.125
    y2, dy2 = y.reshape(-1, SHAPE[-1]), dy.reshape(-1, SHAPE[-1])
    candidates = [("reference", lambda: softmax_backward_ref(y, dy, scale), False),
                  ("numpy float32", lambda: softmax_backward_numpy32(y, dy, scale), False)]
    for v, kernel in VERSIONS.items():
        candidates.append((f"numba v{v}", lambda k=kernel: k(y2, dy2, np.float32(scale),
                                                             np.empty_like(y2)), True))
    candidates.append(("numba wrapper (DEFAULT)", lambda: softmax_backward(y, dy, scale), True))
    run_table(f"softmax_backward {SHAPE} float32", candidates, 3 * y.size * 4, args)


if __name__ == "__main__":
    main()
