"""Where the Numba kernels find a row's dropout draws: in place, as the CUDA kernels do (common.cuh logical_row).

Time-major training masks x (T, B, D) with the draws of its (B, T, D) transpose (§5.4, Backend.draws:
a swapped view of (B, T, D) draws). Instead of copying that view for every sub-layer, forward and
backward, a kernel reads row r = t·B + b of x's draws from row b·T + t of the (B·T, D) draws.
"""
import numpy as np
from numba import njit


def draw_rows(u, D: int):
    """(rows, positions, batch): u's draws as a C-contiguous (R, D) array, a view where u is the swapped
    (T, B, D) view of (B, T, D) draws (positions, batch = T, B), else u laid out as x (0, 0; copied only
    if u is not contiguous otherwise)."""
    if u.ndim == 3 and not u.flags.c_contiguous and u.swapaxes(0, 1).flags.c_contiguous:
        return u.swapaxes(0, 1).reshape(-1, D), u.shape[0], u.shape[1]
    return np.ascontiguousarray(u).reshape(-1, D), 0, 0


@njit(inline="always")
def logical_row(r, positions, batch):
    """The row of the draws that x's row r reads: r itself (batch 0), or b·T + t for r = t·B + b."""
    r = np.int64(r)  # a prange index may be unsigned: int64 keeps the arithmetic integral
    if batch <= 0:
        return r
    t = r // batch
    return (r - t * batch) * positions + t
