"""Embedding backward (scatter-add): float64 NumPy reference, a float32 twin, every Numba version.

Size: the CPU Transformer benchmark (`train bench --preset cpu`): N = 64 x 32 = 2048 tokens, D = 256,
num_embeddings = V = 8000 (Zipf-like ids, so many repeats).
Bytes (napkin math): read dout, write the whole table once, (N * D + V * D) * 4 (+ ids N * 8).
"""
import numpy as np

from benchmarks.common import parse_args, run_table
from minitensor.kernels.embedding_backward.numba_cpu import VERSIONS, embedding_backward
from minitensor.kernels.embedding_backward.reference import embedding_backward_ref

N, D, V = 2048, 256, 8000


def embedding_backward_numpy32(dout, ids, num_embeddings):
    """The fair NumPy baseline: float32 np.add.at."""
    dweight = np.zeros((num_embeddings, dout.shape[1]), dtype=dout.dtype)
    np.add.at(dweight, ids, dout)
    return dweight


def main():
    args = parse_args(__doc__)
    rng = np.random.default_rng(0)
    dout = rng.standard_normal((N, D)).astype(np.float32)
    ids = np.minimum(rng.zipf(1.3, size=N) - 1, V - 1).astype(np.int64)
    blocks = 2
    candidates = [("reference", lambda: embedding_backward_ref(dout, ids, V), False),
                  ("numpy float32", lambda: embedding_backward_numpy32(dout, ids, V), False)]
    for v, kernel in VERSIONS.items():
        candidates.append((f"numba v{v}", lambda k=kernel: k(dout, ids, blocks,
                                                             np.empty((V, D), np.float32)), True))
    candidates.append(("numba wrapper (DEFAULT)", lambda: embedding_backward(dout, ids, V), True))
    run_table(f"embedding_backward ({N}, {D}) into {V} rows float32", candidates,
              (N * D + V * D) * 4, args)


if __name__ == "__main__":
    main()
