"""The post-norm sub-layer connection's forward, z = x + Dropout(s + b), y = LayerNorm(z) (§3.1, §5.4):
float64 NumPy reference, the unfused NumPy float32 chain, every Numba version; on a GPU
(bench_gpu_kernels.py --only sublayer), the seeded CUDA kernel against the unfused chain of our kernels.

Sizes: the CPU Transformer benchmark: N = 2048 rows, D = d_model = 256; Multi30k training on the CPU:
(T, B, D) = (16, 128, 128) time-major with (B, T, D) draws (Backend.draws); on the GPU Transformer-base's
(25000, 512). Threads: NUMBA_NUM_THREADS. Bytes (napkin math): read x and s, write z and y, 4 * N * D * s (+ 8 N for mean, rstd).
"""
import numpy as np

from benchmarks.common import gpu_rows, parse_args, run_table, with_version
from minitensor.kernels.dropout_add_layernorm_forward import numba_cpu
from minitensor.kernels.dropout_add_layernorm_forward.reference import dropout_add_layernorm_forward_ref

N, D, P = 2048, 256, 0.1


def gpu(table, rng):
    """The seeded kernel (time-major draws, as training runs it) against bias add + dropout + add + LayerNorm
    as separate kernels (bench_gpu_kernels.py calls this)."""
    import cupy as cp
    import minitensor as mt

    from benchmarks.bench_gpu_kernels import BF16, FLOAT, gpu as device, launcher

    fused, backend = launcher("dropout_add_layernorm_forward"), mt.get_backend("cuda")
    rows = (100, 250)
    for dtype in (FLOAT, BF16):
        x, s = (device(rng.standard_normal(rows + (512,)), dtype) for _ in range(2))
        bias = device(rng.standard_normal(512), dtype)
        gamma, beta = (cp.asarray(rng.standard_normal(512), dtype=cp.float32) for _ in range(2))
        args = (x, s, bias, gamma, beta, 1e-6, P, 7, True)
        gpu_rows(table, "dropout_add_layernorm_fwd", dtype, [
            ("unfused: bias add, dropout, add, LayerNorm", lambda: backend.unfused_dropout_add_layernorm(*args)),
            ("cuda v1 (seeded, time-major)", lambda: fused.dropout_add_layernorm_forward_seeded(
                x, s, 7, P, bias, gamma, beta, 1e-6, time_major=True))], 4 * x.nbytes + 8 * x.size // 512)


def main():
    args = parse_args(__doc__)
    rng = np.random.default_rng(0)
    x, s = (rng.standard_normal((N, D)).astype(np.float32) for _ in range(2))
    u = rng.random((N, D)).astype(np.float32)
    bias, gamma, beta = (rng.standard_normal(D).astype(np.float32) for _ in range(3))
    inputs = (x, s, u, P, bias, gamma, beta, 1e-6)

    def numpy_chain():
        z = x + np.where(u >= P, (s + bias) * np.float32(1 / (1 - P)), np.float32(0))
        mean = z.mean(axis=1, keepdims=True)
        rstd = 1 / np.sqrt(((z - mean) ** 2).mean(axis=1, keepdims=True) + np.float32(1e-6))
        return (z - mean) * rstd * gamma + beta

    candidates = [("reference", lambda: dropout_add_layernorm_forward_ref(*inputs), False),
                  ("numpy float32 chain", numpy_chain, False)]
    run_table(f"dropout_add_layernorm_forward ({N}, {D}) float32", candidates + versions(inputs), 4 * N * D * 4, args)

    T, B, d_model = 16, 128, 128
    x, s = (rng.standard_normal((T, B, d_model)).astype(np.float32) for _ in range(2))
    u = rng.random((B, T, d_model), dtype=np.float32).swapaxes(0, 1)
    inputs = (x, s, u, P, bias[:d_model], gamma[:d_model], beta[:d_model], 1e-6)
    candidates = [("reference", lambda: dropout_add_layernorm_forward_ref(*inputs), False)]
    run_table(f"dropout_add_layernorm_forward ({T}, {B}, {d_model}) float32 time-major", candidates + versions(inputs),
              4 * x.size * 4, args)


def versions(inputs):
    """Every Numba version through the wrapper."""
    return [(f"numba v{v} (wrapper)", with_version(numba_cpu, v, lambda: numba_cpu.dropout_add_layernorm_forward(
        *inputs)), True) for v in numba_cpu.VERSIONS]

if __name__ == "__main__":
    main()
