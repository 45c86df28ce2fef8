"""Embedding backward (§3.4): scatter-add of output gradients into table rows; NumPy, float64.

Shapes: N = looked-up tokens (B*T), D = d_model, num_embeddings = table rows (V).
"""
import numpy as np

from ..bf16_cast.reference import as_float64, from_float64


def embedding_backward_ref(dout, ids, num_embeddings):
    """dweight = zeros(num_embeddings, D); dweight[ids[i]] += dout[i] (repeated ids add up).

    Returns dweight in dout's dtype (bf16: uint16 bits in, the sums rounded to bf16 bits out).
    An id outside [0, num_embeddings): IndexError. (The GPU kernels, which cannot raise, write
    no row for it and add NaN to row 0 instead, so the step's finiteness check stops the step;
    nothing is written outside the table.)
    """
    dout64 = as_float64(dout)  # (N, D)
    ids = np.asarray(ids).astype(np.int64)  # (N,)
    if ids.size and (ids.min() < 0 or ids.max() >= num_embeddings):
        raise IndexError(f"embedding_backward: id {int(ids.min() if ids.min() < 0 else ids.max())} "
                         f"outside the table [0, {num_embeddings})")
    dweight = np.zeros((num_embeddings, dout64.shape[1]), dtype=np.float64)  # (V, D)
    np.add.at(dweight, ids, dout64)  # unbuffered: repeats add up
    return from_float64(dweight, dout.dtype)
