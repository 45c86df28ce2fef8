"""Solutions to chapter 17's exercises (checked by `check_any_size`, `check_c_owner`) and the answer key PREDICT.

Import this after chapter 17 has called `numba_cuda()`: without a GPU, numba.cuda must already be the simulator.
"""
import functools
import math

import numpy as np

from minitensor.kernels.numba_cuda_compat import import_numba_cuda

cuda = import_numba_cuda()


@functools.cache
def _tiled_any_size(T):
    """Chapter 17's tiled kernel with guards: zeros where a tile runs past A or B, no write past C."""

    @cuda.jit
    def matmul_tiled(c, a, b):
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        row, col = cuda.blockIdx.y * T + ty, cuda.blockIdx.x * T + tx
        M, K, N = a.shape[0], a.shape[1], b.shape[1]
        a_tile = cuda.shared.array((T, T), np.float32)
        b_tile = cuda.shared.array((T, T), np.float32)
        acc = np.float32(0.0)
        for k0 in range(0, K, T):                           # ceil(K / T) steps: the last one is partial
            a_tile[ty, tx] = a[row, k0 + tx] if row < M and k0 + tx < K else 0.0
            b_tile[ty, tx] = b[k0 + ty, col] if k0 + ty < K and col < N else 0.0
            cuda.syncthreads()                              # every thread reaches both barriers, in range or not
            for k in range(T):
                acc += a_tile[ty, k] * b_tile[k, tx]        # the zeros add nothing
            cuda.syncthreads()
        if row < M and col < N:
            c[row, col] = acc

    return matmul_tiled


def matmul_any_size(a, b, tile):
    """C = A B for any shapes: a grid of ceil(N / tile) x ceil(M / tile) blocks of tile x tile threads."""
    (M, _), N = a.shape, b.shape[1]
    c = np.zeros((M, N), dtype=np.float32)
    _tiled_any_size(tile)[(math.ceil(N / tile), math.ceil(M / tile)), (tile, tile)](c, a, b)
    return c


def c_owner(row, col):
    """(lane, i) holding C[row, col] of the m16n8 accumulator: groupID = row mod 8, tig = col // 2."""
    return 4 * (row & 7) + (col >> 1), (col & 1) + 2 * (row >> 3)


PREDICT = """Exercise 1. Each thread of the tiled kernel issues 2 loads per step and there are K/T = 16/4 = 4 steps:
8 loads (2K/T), against 2K = 32 in the naive kernel. Naive, every element of A is loaded once by each of the N = 16
threads that compute its row of C: 16 times. Tiled, it is loaded once per block that needs it, the N/T = 4 blocks
along its row of C: 4 times. The same factor T = 4 both ways."""
