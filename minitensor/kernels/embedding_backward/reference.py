"""Embedding backward (§3.4): scatter-add of output gradients into table rows; NumPy, float64.

Shapes: N = looked-up tokens (B*T), D = d_model, num_embeddings = table rows (V).
"""
import numpy as np


def embedding_backward_ref(dout, ids, num_embeddings):
    """dweight = zeros(num_embeddings, D); dweight[ids[i]] += dout[i] (repeated ids add up).

    Returns dweight in dout's dtype.
    """
    dout64 = np.asarray(dout, dtype=np.float64)  # (N, D)
    dweight = np.zeros((num_embeddings, dout64.shape[1]), dtype=np.float64)  # (V, D)
    np.add.at(dweight, np.asarray(ids).astype(np.int64), dout64)  # unbuffered: repeats add up
    return dweight.astype(dout.dtype)
