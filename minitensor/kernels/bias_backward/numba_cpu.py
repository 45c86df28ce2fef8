"""The bias's backward on the CPU with Numba (column sums, through a ReLU or not); spec: reference.py.

v1: naive port of the reference, one column per prange iteration, float64 sums down the rows
v2: row blocks in parallel, each adding whole rows into its own float64 partial sums (rows read
    in order, so every load is contiguous), then the partials summed in order

Shapes: G leading entries (batch), R rows, C columns: dy (G, R, C) -> db (G, C).
"""
import numpy as np
from numba import njit, prange

BLOCK = 256  # rows per partial sum (v2)


@njit(cache=True, parallel=True)
def bias_backward_v1(dy, mask, use_mask, dx, db):
    G, R, C = dy.shape
    for col in prange(G * C):
        g, j = col // C, col % C
        total = 0.0
        for r in range(R):
            v = dy[g, r, j]
            if use_mask:
                if not mask[g, r, j] > 0:
                    v = 0.0
                dx[g, r, j] = v
            total += np.float64(v)
        db[g, j] = total


@njit(cache=True, parallel=True)
def bias_backward_v2(dy, mask, use_mask, dx, db):
    G, R, C = dy.shape
    blocks = (R + BLOCK - 1) // BLOCK
    partial = np.zeros((G, blocks, C))
    for job in prange(G * blocks):
        g, b = job // blocks, job % blocks
        for r in range(b * BLOCK, min(R, (b + 1) * BLOCK)):
            for j in range(C):
                v = dy[g, r, j]
                if use_mask:
                    if not mask[g, r, j] > 0:
                        v = 0.0
                    dx[g, r, j] = v
                partial[g, b, j] += np.float64(v)
    for g in range(G):
        for j in range(C):
            total = 0.0
            for b in range(blocks):
                total += partial[g, b, j]
            db[g, j] = total


VERSIONS = {1: bias_backward_v1, 2: bias_backward_v2}
DEFAULT = 2


def bias_backward(dy, relu_out, dtype):
    """(dx, db): dx = dy where relu_out > 0 (dy itself without relu_out), db = Σ over axis -2 of dx, in dtype."""
    R, C = dy.shape[-2:]
    d3 = np.ascontiguousarray(dy).reshape(-1, R, C)  # (G, R, C)
    use_mask = relu_out is not None
    mask = np.ascontiguousarray(relu_out, dtype=dy.dtype).reshape(d3.shape) if use_mask else d3
    dx = np.empty_like(d3) if use_mask else d3  # without a mask nothing is written: dx is dy
    db = np.empty((d3.shape[0], C), dtype=np.float64)
    VERSIONS[DEFAULT](d3, mask, use_mask, dx, db)
    return (dx.reshape(dy.shape) if use_mask else dy), db.reshape(dy.shape[:-2] + (C,)).astype(dtype)
