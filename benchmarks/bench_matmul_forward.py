"""Teaching GEMMs (kernels/matmul_forward) vs cuBLAS at 4096^3, float32 and float16 (needs CuPy).

The mirrored entry point for the matmul folder; the work is bench_gpu_kernels.bench_matmul.
Napkin math: 2*M*N*K FLOPs per product; "% peak" is % of cuBLAS (cupy.matmul) in the same run.

    python -m benchmarks.bench_matmul_forward [--json rows.json]
"""
from benchmarks.bench_gpu_kernels import main

if __name__ == "__main__":
    main(only="matmul")
