"""Bias + ReLU in place (§3.3, Eq. (2)): float64 NumPy reference, NumPy float32, every Numba version; on a GPU
(bench_gpu_kernels.py --only bias), every CUDA version against CuPy's two kernels (x += b, then the ReLU).

Size: the CPU Transformer benchmark: N = 64 x 32 = 2048 rows, C = d_ff = 1024; on the GPU Transformer-base's
(25000, 2048). Bytes (napkin math): read and write x, 2 * N * C * s (+ C bias values).
"""
import numpy as np

from benchmarks.common import gpu_rows, parse_args, run_table
from minitensor.kernels.bias_relu_forward.numba_cpu import VERSIONS, bias_relu_forward
from minitensor.kernels.bias_relu_forward.reference import bias_relu_forward_ref

N, C = 2048, 1024


def gpu(table, rng):
    """The CUDA versions on (25000, 2048), float32 and bf16 (bench_gpu_kernels.py calls this)."""
    import cupy as cp

    from benchmarks.bench_gpu_kernels import BF16, FLOAT, gpu as device, launcher

    kernels = launcher("bias_relu_forward")
    for dtype in (FLOAT, BF16):
        x = device(rng.standard_normal((25000, 2048)), dtype)
        bias = cp.asarray(rng.standard_normal(2048), dtype=cp.float32)
        candidates = [] if dtype == BF16 else [("cupy x += b; maximum(x, 0)",
                                                lambda: cp.maximum(cp.add(x, bias, out=x), 0, out=x))]
        candidates += [(f"cuda v{v}", lambda f=f: f(x, bias)) for v, f in kernels.VERSIONS.items()]
        gpu_rows(table, "bias_relu_fwd", dtype, candidates, 2 * x.nbytes)


def main():
    args = parse_args(__doc__)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, C)).astype(np.float32)
    bias = rng.standard_normal(C).astype(np.float32)
    work = x.copy()
    candidates = [("reference", lambda: bias_relu_forward_ref(work, bias), False),
                  ("numpy float32", lambda: np.maximum(np.add(work, bias, out=work), 0, out=work), False)]
    candidates += [(f"numba v{v}", lambda k=k: k(work, bias), True) for v, k in VERSIONS.items()]
    candidates.append(("numba wrapper (DEFAULT)", lambda: bias_relu_forward(work, bias), True))
    run_table(f"bias_relu_forward ({N}, {C}) float32", candidates, 2 * N * C * 4, args)


if __name__ == "__main__":
    main()
