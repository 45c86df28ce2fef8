"""Softmax forward: float64 NumPy reference, a float32 NumPy twin, and every Numba version.

Size: attention scores of the CPU Transformer benchmark (`train bench --preset cpu`): B=64 sentences, H=4 heads,
T=S=32 tokens, so x is (B, H, T, S) float32 with a (B, 1, 1, S) padding mask.
Bytes (napkin math): read x and write y once, 2 * B*H*T*S * 4; the mask is B*S bytes.
"""
import numpy as np

from benchmarks.common import parse_args, run_table
from minitensor.kernels.softmax_forward.numba_cpu import VERSIONS, softmax_forward
from minitensor.kernels.softmax_forward.reference import softmax_forward_ref

B, H, T, S = 64, 4, 32, 32


def softmax_forward_numpy32(x, scale, mask):
    """The fair NumPy baseline: same math, but in float32 and without the float64 copies."""
    z = np.where(mask, np.float32(-np.inf), x * np.float32(scale))  # (B, H, T, S)
    z -= z.max(axis=-1, keepdims=True)  # fully blocked rows would give NaN here; none in this input
    np.exp(z, out=z)
    z /= z.sum(axis=-1, keepdims=True)
    return z


def main():
    args = parse_args(__doc__)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, H, T, S)).astype(np.float32)
    lengths = rng.integers(S // 2, S + 1, size=B)
    mask = (np.arange(S) >= lengths[:, None])[:, None, None, :]  # (B, 1, 1, S) padding mask
    scale = 1.0 / np.sqrt(64.0)
    mask4 = np.ascontiguousarray(mask)  # what the wrapper passes: (B, 1, 1, S), not broadcast
    candidates = [("reference", lambda: softmax_forward_ref(x, scale, mask), False),
                  ("numpy float32", lambda: softmax_forward_numpy32(x, scale, mask), False)]
    for v, kernel in VERSIONS.items():
        candidates.append((f"numba v{v}", lambda k=kernel: k(x, np.float32(scale), mask4,
                                                             np.empty_like(x)), True))
    candidates.append(("numba wrapper (DEFAULT)", lambda: softmax_forward(x, scale, mask), True))
    run_table("softmax_forward (64, 4, 32, 32) float32", candidates, 2 * x.size * 4, args)


if __name__ == "__main__":
    main()
