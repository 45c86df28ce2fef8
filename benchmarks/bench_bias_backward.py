"""The bias's backward (column sums, through a ReLU or not): float64 NumPy reference, NumPy float32
(dy.sum(axis=0)), every Numba version; on a GPU (bench_gpu_kernels.py --only bias), every CUDA version
against 1ᵀ dy as a matrix-vector product through cuBLAS (what Linear ran before) and dy.sum(axis=0).

Size: the CPU Transformer benchmark: N = 2048 rows, C = 1024; on the GPU Transformer-base's (25000, 512)
and (25000, 2048). Bytes (napkin math): read dy, N * C * s (with a ReLU: read y, write dx, 3 * N * C * s).
"""
import numpy as np

from benchmarks.common import gpu_rows, parse_args, run_table
from minitensor.kernels.bias_backward.numba_cpu import VERSIONS, bias_backward
from minitensor.kernels.bias_backward.reference import bias_backward_ref

N, C = 2048, 1024


def gpu(table, rng):
    """The CUDA versions against the GEMV and CuPy's reduction (bench_gpu_kernels.py calls this)."""
    import cupy as cp

    from benchmarks.bench_gpu_kernels import BF16, FLOAT, gpu as device, launcher
    from minitensor.backends import cupy_blas

    kernels = launcher("bias_backward")
    for cols in (512, 2048):
        for dtype in (FLOAT, BF16):
            dy = device(rng.standard_normal((25000, cols)), dtype)
            ones = device(np.ones((1, 25000)), dtype)
            candidates = [("1ᵀ dy (cuBLAS GEMV)", lambda: cupy_blas.matmul(ones, dy, np.float32, xp=cp,
                                                                           gemm=cupy_blas.cublas_gemm))]
            if dtype == FLOAT:
                candidates.append(("cupy dy.sum(axis=0)", lambda: dy.sum(axis=0)))
            candidates += [(f"cuda v{v}", lambda f=f: f(dy, None, np.float32)) for v, f in kernels.VERSIONS.items()]
            gpu_rows(table, f"bias_bwd C={cols}", dtype, candidates, dy.nbytes)


def main():
    args = parse_args(__doc__)
    rng = np.random.default_rng(0)
    dy = rng.standard_normal((N, C)).astype(np.float32)
    dx, db = np.empty((1, N, C), np.float32), np.empty((1, C))
    candidates = [("reference", lambda: bias_backward_ref(dy, None, np.float32), False),
                  ("numpy float32", lambda: dy.sum(axis=0), False)]
    candidates += [(f"numba v{v}", lambda k=k: k(dy[None], dy[None], False, dx, db), True) for v, k in VERSIONS.items()]
    candidates.append(("numba wrapper (DEFAULT)", lambda: bias_backward(dy, None, np.float32), True))
    run_table(f"bias_backward ({N}, {C}) float32", candidates, N * C * 4, args)


if __name__ == "__main__":
    main()
