"""The post-norm sub-layer connection's backward (§3.1, §5.4): float64 NumPy reference, the unfused NumPy
float32 chain, every Numba version; on a GPU (bench_gpu_kernels.py --only sublayer), the seeded CUDA
kernels against the unfused chain of our kernels (gradient add, LayerNorm backward, dropout, bias sums).

Sizes: the CPU Transformer benchmark: N = 2048 rows, D = d_model = 256; Multi30k training on the CPU:
(T, B, D) = (16, 128, 128) time-major with (B, T, D) draws (Backend.draws), one gradient; on the GPU
Transformer-base's (25000, 512). Threads: NUMBA_NUM_THREADS. Bytes (napkin math): read dy, dy2 and z, write dx and ds, 5 * N * D * s (+ 8 N).
"""
import numpy as np

from benchmarks.common import gpu_rows, parse_args, run_table, with_version
from minitensor.kernels.dropout_add_layernorm_backward import numba_cpu
from minitensor.kernels.dropout_add_layernorm_backward.reference import dropout_add_layernorm_backward_ref

N, D, P = 2048, 256, 0.1


def gpu(table, rng):
    """The seeded kernels (two gradients, time-major draws) against the unfused chain (bench_gpu_kernels.py)."""
    import cupy as cp
    import minitensor as mt

    from benchmarks.bench_gpu_kernels import BF16, FLOAT, gpu as device, launcher

    fused, backend = launcher("dropout_add_layernorm_backward"), mt.get_backend("cuda")
    rows = (100, 250)
    for dtype in (FLOAT, BF16):
        dys = tuple(device(rng.standard_normal(rows + (512,)), dtype) for _ in range(2))
        z = device(rng.standard_normal(rows + (512,)), dtype)
        gamma = cp.asarray(rng.standard_normal(512), dtype=cp.float32)
        mean, rstd = cp.zeros(rows, cp.float32), cp.ones(rows, cp.float32)
        args = (dys, z, gamma, mean, rstd, P, 7, True, True)
        gpu_rows(table, "dropout_add_layernorm_bwd", dtype, [
            ("unfused: add, LayerNorm bwd, dropout, bias sums", lambda: backend.unfused_dropout_add_layernorm_grad(*args)),
            ("cuda v1 (seeded, time-major)", lambda: fused.dropout_add_layernorm_backward_seeded(
                dys, z, 7, P, gamma, mean, rstd, True, time_major=True))], 5 * z.nbytes + 8 * z.size // 512)


def main():
    args = parse_args(__doc__)
    rng = np.random.default_rng(0)
    dy, dy2, z = (rng.standard_normal((N, D)).astype(np.float32) for _ in range(3))
    u = rng.random((N, D)).astype(np.float32)
    gamma = rng.standard_normal(D).astype(np.float32)
    mean, rstd = z.mean(axis=1), (1 / z.std(axis=1)).astype(np.float32)
    inputs = ((dy, dy2), z, u, P, gamma, mean, rstd, True)

    def numpy_chain():
        d = dy + dy2
        zhat = (z - mean[:, None]) * rstd[:, None]
        g = d * gamma
        dx = rstd[:, None] * (g - g.mean(axis=1, keepdims=True) - zhat * (g * zhat).mean(axis=1, keepdims=True))
        ds = np.where(u >= P, dx * np.float32(1 / (1 - P)), np.float32(0))
        return dx, ds, (d * zhat).sum(axis=0), d.sum(axis=0), ds.sum(axis=0)

    candidates = [("reference", lambda: dropout_add_layernorm_backward_ref(*inputs), False),
                  ("numpy float32 chain", numpy_chain, False)]
    run_table(f"dropout_add_layernorm_backward ({N}, {D}) float32", candidates + versions(inputs), 5 * N * D * 4, args)

    T, B, d_model = 16, 128, 128
    dy, z = (rng.standard_normal((T, B, d_model)).astype(np.float32) for _ in range(2))
    u = rng.random((B, T, d_model), dtype=np.float32).swapaxes(0, 1)
    gamma = rng.standard_normal(d_model).astype(np.float32)
    inputs = ((dy,), z, u, P, gamma, z.mean(axis=-1), (1 / z.std(axis=-1)).astype(np.float32), True)
    candidates = [("reference", lambda: dropout_add_layernorm_backward_ref(*inputs), False)]
    run_table(f"dropout_add_layernorm_backward ({T}, {B}, {d_model}) float32 time-major", candidates + versions(inputs),
              4 * z.size * 4, args)


def versions(inputs):
    """Every Numba version through the wrapper."""
    return [(f"numba v{v} (wrapper)", with_version(numba_cpu, v, lambda: numba_cpu.dropout_add_layernorm_backward(
        *inputs)), True) for v in numba_cpu.VERSIONS]

if __name__ == "__main__":
    main()
