"""The two ceilings of the GPU at hand, measured, not read off a datasheet: device memory bandwidth (a
large device-to-device copy, bytes read + written) and the bf16 matrix rate (an 8192^3 product on
random data: zeros run faster, through cuBLAS as cupy_blas calls it, and through PyTorch when it
imports). Every kernel and step timing of a lease is read as a fraction of these two
(benchmarks/gpu_lease.sh); an H200 and an H100 share the matrix rate but not the bandwidth.

    PYTHONPATH=. python benchmarks/bench_ceilings.py [--json out.json] [--gib 2] [--n 8192]

Each number is printed as soon as it is measured. Benchmarks report; they never assert.
"""
from __future__ import annotations

import argparse
import json


def event_ms(cp, fn, repeats: int) -> float:
    """Median device ms of fn over `repeats` launches (CUDA events), after two warm-up calls."""
    fn()
    fn()
    times = []
    for _ in range(repeats):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end))
    return sorted(times)[len(times) // 2]


def copy_gbps(cp, gib: float) -> float:
    x = cp.random.default_rng(0).random(int(gib * 2**30) // 4, dtype=cp.float32)   # random, never zeros
    y = cp.empty_like(x)
    ms = event_ms(cp, lambda: cp.copyto(y, x), repeats=20)
    return 2 * x.nbytes / ms / 1e6


def bf16_tflops(cp, n: int) -> float:
    import minitensor as mt
    from minitensor.backends import cupy_blas
    from minitensor.dtypes import BF16

    backend = mt.get_backend("cuda")
    rng = cp.random.default_rng(1)
    a, b = (backend.cast(rng.standard_normal((n, n), dtype=cp.float32), BF16) for _ in range(2))
    ms = event_ms(cp, lambda: cupy_blas.matmul(a, b, xp=cp, gemm=backend.gemm, plans=backend.plans), repeats=10)
    return 2 * n**3 / ms / 1e9


def torch_bf16_tflops(n: int) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for _ in range(2):
        a @ b
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return 2 * n**3 / sorted(times)[len(times) // 2] / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--gib", type=float, default=2.0, help="GiB copied (default 2: many times the L2)")
    parser.add_argument("--n", type=int, default=8192, help="the square product's size (default 8192)")
    args = parser.parse_args()
    import cupy as cp

    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    result = {"device": props["name"].decode(), "copy_gib": args.gib, "gemm_n": args.n}
    print(f"device: {result['device']}", flush=True)
    for key, measure, unit in (("copy_gbps", lambda: copy_gbps(cp, args.gib), "GB/s (read + write)"),
                               ("bf16_gemm_tflops", lambda: bf16_tflops(cp, args.n), "TFLOP/s (cupy_blas)"),
                               ("torch_bf16_gemm_tflops", lambda: torch_bf16_tflops(args.n), "TFLOP/s (PyTorch)")):
        try:
            result[key] = measure()
            print(f"{key}: {result[key]:.1f} {unit}" if result[key] is not None else f"{key}: no torch", flush=True)
        except Exception as exc:  # noqa: BLE001 - one failing ceiling is reported, the others still run
            result[key] = None
            print(f"!! {key}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
