"""GPU kernels (kernels/*/cupy_launch.py) vs library baselines: check every version, then time it.

Sizes are Transformer-base training shapes (Table 3, batches of ~25000 tokens): attention
scores (B, H, T, L) = (250, 8, 100, 100); LayerNorm rows (25000, 512); logits (25000, 37000);
Adam over 63M parameters; embedding rows (25000, 512) into a 37000-row table; GEMMs at 4096^3;
bf16 (uint16 bits) beside float32 and float16 where mixed precision uses it, bf16_cast, the
base step's half-precision GEMMs through cupy.matmul and through cupy_blas, and (each
from its own bench_<op>.py) dropout + add + LayerNorm both ways and the bias kernels.
Napkin math, the bytes each op must move at least once (s = bytes per element):
  softmax fwd 2ns (x, y) | softmax bwd 3ns (y, dy, dx) | layernorm fwd 2ns + 8 rows (mean, rstd)
  layernorm bwd 3ns + 8 rows | cross-entropy 2NVs (logits, dlogits) | adam 28 B/param (fp32
  p, g, m, v read, p, m, v written) | embedding bwd NDs + VDs | dropout n(2s + 4) | GEMM 2MNK FLOPs.
The DRAM ceiling is a large device-to-device copy measured in the same run (bytes read + written).
Baselines: torch (softmax, native_layer_norm(+backward), cross_entropy(label_smoothing=0.1)
forward+backward, Adam(fused=True), embedding_dense_backward) when torch imports, else CuPy;
cuBLAS (cupy.matmul) for GEMMs, where "% peak" means % of cuBLAS.

    PYTHONPATH=. python benchmarks/bench_gpu_kernels.py [--json rows.json] [--only softmax,layernorm]

Each row is printed as soon as it is measured, the whole table again at the end.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import time

import cupy as cp
import numpy as np
from cupyx.profiler import benchmark

from minitensor.backends import cupy_blas
from minitensor.dtypes import BF16
from minitensor.kernels.bf16_cast.reference import float_to_bf16
from minitensor.testing import assert_close

try:
    import torch
except ImportError:
    torch = None

HALF, FLOAT = np.dtype(np.float16), np.dtype(np.float32)


def gpu(values, dtype):
    """Float values on the device in dtype (bf16: uint16 bits, rounded to nearest even)."""
    return cp.asarray(float_to_bf16(values)) if dtype == BF16 else cp.asarray(values, dtype=dtype)


def gpu_ms(fn, max_repeat=50):
    """Median GPU time in ms: one compile/warm call, then enough repeats for ~0.2 s."""
    fn()
    cp.cuda.Device().synchronize()
    start = time.perf_counter()
    fn()
    cp.cuda.Device().synchronize()
    once = time.perf_counter() - start
    repeats = int(min(max_repeat, max(3, 0.2 / max(once, 1e-6))))
    return float(np.median(benchmark(fn, n_repeat=repeats, n_warmup=2).gpu_times[0])) * 1e3


def dram_copy_gbps():
    """The bandwidth ceiling: 1 GiB device-to-device copy, counting bytes read plus written."""
    src = cp.random.default_rng(0).random(2**28, dtype=cp.float32)
    dst = cp.empty_like(src)
    return 2 * src.nbytes / gpu_ms(lambda: cp.copyto(dst, src)) / 1e6


def t(a):
    """A CuPy array seen by torch, zero-copy (bf16 bits as torch.bfloat16)."""
    return torch.from_dlpack(a).view(torch.bfloat16) if a.dtype == BF16 else torch.from_dlpack(a)


class Table:
    def __init__(self, peak_gbps):
        self.rows, self.peak_gbps = [], peak_gbps

    def add(self, op, version, dtype, fn, amount, unit, check=None, baseline=None, peak=None):
        """Check (a callable that raises on mismatch), time, and record one row."""
        row = dict(op=op, version=version, dtype=str(np.dtype(dtype)), unit=unit)
        try:
            if check is not None:
                check()
            ms = gpu_ms(fn, max_repeat=10 if unit == "TFLOP/s" else 50)
        except Exception as exc:  # a failing version is reported, the others still run
            row.update(ms=None, error=f"{type(exc).__name__}: {str(exc)[:300]}")
            print(f"!! {op} {version} {row['dtype']}: {row['error']}", flush=True)
            self.rows.append(row)
            return None
        rate = amount / ms / 1e6 if unit == "GB/s" else amount / ms / 1e9
        ceiling = self.peak_gbps if unit == "GB/s" else peak
        row.update(ms=ms, rate=rate, pct_peak=None if not ceiling else 100 * rate / ceiling,
                   vs_baseline=None if baseline is None else baseline / ms)
        self.rows.append(row)
        print(self.format(row), flush=True)   # a run stopped by its time limit keeps what it measured
        return ms

    @staticmethod
    def format(r):
        if r.get("ms") is None:
            return f"{r['op']} | {r['version']} | {r['dtype']} | FAILED | {r['error'][:80]}"
        pct = "" if r["pct_peak"] is None else f"{r['pct_peak']:.0f}%"
        vs = "" if r["vs_baseline"] is None else f"{r['vs_baseline']:.2f}x"
        return f"{r['op']} | {r['version']} | {r['dtype']} | {r['ms']:.3f} | {r['rate']:.1f} {r['unit']} | {pct} | {vs}"

    def print(self):
        print(f"\nDRAM ceiling (device copy): {self.peak_gbps:.0f} GB/s; vs baseline = baseline ms / ms")
        print("op | version | dtype | ms | GB/s or TFLOP/s | % peak | vs baseline")
        for r in self.rows:
            print(self.format(r))


def launcher(op):
    return importlib.import_module(f"minitensor.kernels.{op}.cupy_launch")


def reference(op):
    return getattr(importlib.import_module(f"minitensor.kernels.{op}.reference"), f"{op}_ref")


def bench_softmax(table, rng):
    fwd, bwd = launcher("softmax_forward"), launcher("softmax_backward")
    B, H, T, L = 250, 8, 100, 100
    scale = 1 / 8
    mask = cp.asarray(np.arange(L) >= rng.integers(L // 2, L + 1, size=B)[:, None])[:, None, None, :]
    for dtype in (FLOAT, HALF, BF16):
        x = gpu(rng.standard_normal((B, H, T, L)), dtype)
        n = x.size * dtype.itemsize
        base = None
        if torch is not None:
            xt = t(x)
            base = table.add("softmax_fwd", "torch.softmax (no mask)", dtype, lambda: torch.softmax(xt, -1), 2 * n, "GB/s")
        ref = reference("softmax_forward")(x[:2].get(), scale, mask[:2].get())
        for v, f in fwd.VERSIONS.items():
            table.add("softmax_fwd", f"cuda v{v}", dtype, lambda f=f: f(x, scale, mask), 2 * n, "GB/s",
                      check=lambda f=f: assert_close(f(x[:2], scale, mask[:2]), ref, f"softmax v{v}"), baseline=base)
        if dtype == FLOAT:
            try:
                nc = importlib.import_module("minitensor.kernels.softmax_forward.numba_cuda")
                table.add("softmax_fwd", "numba_cuda v1", dtype, lambda: nc.softmax_forward(x, scale, mask), 2 * n,
                          "GB/s", check=lambda: assert_close(nc.softmax_forward(x[:2], scale, mask[:2]), ref, "nc"),
                          baseline=base)
            except Exception as exc:
                print(f"!! numba_cuda softmax import: {type(exc).__name__}: {exc}")
        y = fwd.softmax_forward(x, scale, mask)
        dy = gpu(rng.standard_normal(x.shape), dtype)
        base = None
        if torch is not None:
            yt, dyt = t(y), t(dy)
            base = table.add("softmax_bwd", "torch _softmax_backward_data", dtype,
                             lambda: torch._softmax_backward_data(dyt, yt, -1, yt.dtype), 3 * n, "GB/s")
        ref = reference("softmax_backward")(y[:2].get(), dy[:2].get(), scale)
        for v, f in bwd.VERSIONS.items():
            table.add("softmax_bwd", f"cuda v{v}", dtype, lambda f=f: f(y, dy, scale), 3 * n, "GB/s",
                      check=lambda f=f: assert_close(f(y[:2], dy[:2], scale), ref, f"softmax bwd v{v}"), baseline=base)


def bench_layernorm(table, rng):
    fwd, bwd = launcher("layernorm_forward"), launcher("layernorm_backward")
    N, D = 25000, 512
    for dtype in (FLOAT, HALF, BF16):
        x = gpu(rng.standard_normal((N, D)) + 0.5, dtype)
        gamma, beta = (cp.asarray(rng.standard_normal(D), dtype=cp.float32) for _ in range(2))
        n = x.size * dtype.itemsize
        base = None
        if torch is not None:
            xt, gt, bt = t(x), t(gamma).to(t(x).dtype), t(beta).to(t(x).dtype)
            base = table.add("layernorm_fwd", "torch native_layer_norm", dtype,
                             lambda: torch.native_layer_norm(xt, [D], gt, bt, 1e-5), 2 * n + 8 * N, "GB/s")
        ref = reference("layernorm_forward")(x[:256].get(), gamma.get(), beta.get(), 1e-5)
        for v, f in fwd.VERSIONS.items():
            def check(f=f, v=v):
                for got, want in zip(f(x[:256], gamma, beta, 1e-5), ref):
                    assert_close(got, want, f"layernorm v{v}", atol=1e-5 if dtype == FLOAT else None)
            table.add("layernorm_fwd", f"cuda v{v}", dtype, lambda f=f: f(x, gamma, beta, 1e-5), 2 * n + 8 * N,
                      "GB/s", check=check, baseline=base)
        if dtype == FLOAT:
            try:
                nc = importlib.import_module("minitensor.kernels.layernorm_forward.numba_cuda")
                table.add("layernorm_fwd", "numba_cuda v1", dtype, lambda: nc.layernorm_forward(x, gamma, beta, 1e-5),
                          2 * n + 8 * N, "GB/s", baseline=base,
                          check=lambda: assert_close(nc.layernorm_forward(x[:256], gamma, beta, 1e-5)[0], ref[0],
                                                     "nc", atol=1e-5))
            except Exception as exc:
                print(f"!! numba_cuda layernorm import: {type(exc).__name__}: {exc}")
        _, mean, rstd = fwd.layernorm_forward(x, gamma, beta, 1e-5)
        dy = gpu(rng.standard_normal((N, D)), dtype)
        base = None
        if torch is not None:
            dyt, mt, rt = t(dy), t(mean).reshape(N, 1), t(rstd).reshape(N, 1)
            base = table.add("layernorm_bwd", "torch native_layer_norm_backward", dtype,
                             lambda: torch.ops.aten.native_layer_norm_backward(dyt, xt, [D], mt, rt, gt, bt,
                                                                               [True, True, True]),
                             3 * n + 8 * N, "GB/s")
        small = (dy[:256], x[:256], gamma, mean[:256], rstd[:256])
        ref_b = reference("layernorm_backward")(*(a.get() for a in small))
        for v, f in bwd.VERSIONS.items():
            def check(f=f, v=v):
                for got, want in zip(f(*small), ref_b):
                    # float32 sums over 256 rows (dgamma, dbeta are float32 for float16 x too)
                    assert_close(got, want, f"layernorm bwd v{v}", atol=None if got.dtype in (HALF, BF16) else 1e-4)
            table.add("layernorm_bwd", f"cuda v{v}", dtype, lambda f=f: f(dy, x, gamma, mean, rstd), 3 * n + 8 * N,
                      "GB/s", check=check, baseline=base)


def bench_cross_entropy(table, rng):
    ce = launcher("cross_entropy_forward")
    N, V, ignore_index = 25000, 37000, 0  # ignore_index: the pad id
    targets = cp.asarray(rng.integers(1, V, size=N))
    targets[::50] = ignore_index
    for dtype in (FLOAT, HALF):
        logits = cp.random.default_rng(1).standard_normal((N, V), dtype=cp.float32).astype(dtype)
        n = logits.size * dtype.itemsize
        base = None
        if torch is not None:
            lt = t(logits).requires_grad_(True)
            tt = t(targets)

            def torch_ce():
                loss = torch.nn.functional.cross_entropy(lt, tt, ignore_index=ignore_index, label_smoothing=0.1,
                                                         reduction="sum")
                return torch.autograd.grad(loss, lt)
            base = table.add("cross_entropy", "torch F.cross_entropy fwd+bwd", dtype, torch_ce, 2 * n, "GB/s")
            del lt
        ref = reference("cross_entropy_forward")(logits[:64].get(), targets[:64].get(), 0.1, ignore_index)
        for v, f in ce.VERSIONS.items():
            def check(f=f, v=v):
                for got, want in zip(f(logits[:64], targets[:64], 0.1, ignore_index), ref):
                    assert_close(got, want, f"cross_entropy v{v}")
            table.add("cross_entropy", f"cuda v{v}", dtype, lambda f=f: f(logits, targets, 0.1, ignore_index),
                      2 * n, "GB/s", check=check, baseline=base)
        del logits
        cp.get_default_memory_pool().free_all_blocks()
        if torch is not None:
            torch.cuda.empty_cache()


def bench_adam(table, rng):
    adam = launcher("adam_step")
    P = 63_000_000
    hyper = (1e-3, 0.9, 0.98, 1e-9)
    param, grad = (cp.asarray(rng.standard_normal(P), dtype=cp.float32) for _ in range(2))
    m, v = cp.zeros(P, cp.float32), cp.zeros(P, cp.float32)
    base = None
    if torch is not None:
        pt = torch.nn.Parameter(t(param.copy()))
        pt.grad = t(grad)
        opt = torch.optim.Adam([pt], lr=hyper[0], betas=hyper[1:3], eps=hyper[3], fused=True)
        base = table.add("adam", "torch Adam(fused=True)", FLOAT, opt.step, 28 * P, "GB/s")
    small = [a[:100_000].copy() for a in (param, grad, m, v)]
    for ver, f in adam.VERSIONS.items():
        def check(f=f, ver=ver):
            mine = [a.copy() for a in small]
            theirs = [a.get() for a in small]
            f(*mine, *hyper, 3)
            reference("adam_step")(*theirs, *hyper, 3)
            for got, want in zip(mine, theirs):
                assert_close(got, want, f"adam v{ver}")
        table.add("adam", f"cuda v{ver}", FLOAT, lambda f=f: f(param, grad, m, v, *hyper, 3), 28 * P, "GB/s",
                  check=check, baseline=base)


def bench_embedding_and_dropout(table, rng):
    emb, drop = launcher("embedding_backward"), launcher("dropout_forward")
    N, D, V = 25000, 512, 37000
    ids = cp.asarray(rng.integers(0, V, size=N))
    for dtype in (FLOAT, HALF):
        dout = cp.asarray(rng.standard_normal((N, D)), dtype=dtype)
        amount = (N * D + V * D) * dtype.itemsize
        base = None
        if torch is not None:
            dt, it = t(dout), t(ids)
            base = table.add("embedding_bwd", "torch embedding_dense_backward", dtype,
                             lambda: torch.ops.aten.embedding_dense_backward(dt, it, V, -1, False), amount, "GB/s")
        ref = reference("embedding_backward")(dout[:2000].get(), ids[:2000].get(), V)
        for v, f in emb.VERSIONS.items():
            table.add("embedding_bwd", f"cuda v{v}", dtype, lambda f=f: f(dout, ids, V), amount, "GB/s",
                      check=lambda f=f: assert_close(f(dout[:2000], ids[:2000], V), ref, "embedding", atol=1e-5),
                      baseline=base)
        x = cp.asarray(rng.standard_normal((N, 4 * D)), dtype=dtype)  # the FFN's hidden activations
        u = cp.random.default_rng(2).random(x.shape, dtype=cp.float32)
        amount = x.size * (2 * dtype.itemsize + 4)
        base = table.add("dropout", "cupy where(u >= p, x / (1 - p), 0)", dtype,
                         lambda: cp.where(u >= 0.1, x * dtype.type(1 / 0.9), dtype.type(0)), amount, "GB/s")
        ref = reference("dropout_forward")(x[:64].get(), u[:64].get(), 0.1)
        for v, f in drop.VERSIONS.items():
            table.add("dropout", f"cuda v{v}", dtype, lambda f=f: f(x, u, 0.1), amount, "GB/s",
                      check=lambda f=f: assert_close(f(x[:64], u[:64], 0.1), ref, "dropout"), baseline=base)


def bench_bf16(table, rng):
    """bf16 conversion vs the copy ceiling; half-precision GEMMs of the base step: cupy.matmul vs cupy_blas."""
    cast = launcher("bf16_cast")
    x = cp.asarray(rng.standard_normal((25000, 512)), dtype=cp.float32)
    bits = cast.bf16_cast(x, BF16)
    amount = x.size * 6  # 4 bytes read + 2 written (or the reverse)
    base = table.add("bf16_cast", "cupy astype(float16)", FLOAT, lambda: x.astype(cp.float16), amount, "GB/s")
    ref = reference("bf16_cast")(x[:300].get(), BF16)
    for v, f in cast.VERSIONS.items():
        table.add("bf16_cast", f"cuda v{v} to bf16", FLOAT, lambda f=f: f(x, BF16), amount, "GB/s", baseline=base,
                  check=lambda f=f: np.testing.assert_array_equal(f(x[:300], BF16).get(), ref))
        table.add("bf16_cast", f"cuda v{v} from bf16", BF16, lambda f=f: f(bits, np.float32), amount, "GB/s")
    # attention's batched products, (B·H, T, d) @ (B·H, d, T), and a Linear's (25000, 512) @ (512, 2048)
    shapes = {"attention QKᵀ": ((2000, 100, 64), (2000, 100, 64), True),
              "linear W1": ((25000, 512), (512, 2048), False)}
    for name, (sa, sb, transpose_b) in shapes.items():
        flops = 2 * int(np.prod(sa)) * (sb[-2] if transpose_b else sb[-1])
        for dtype in (HALF, BF16):
            a, b = gpu(rng.standard_normal(sa), dtype), gpu(rng.standard_normal(sb), dtype)
            b = cp.swapaxes(b, -1, -2) if transpose_b else b
            if dtype == HALF:
                table.add(f"gemm {name}", "cupy.matmul", dtype, lambda a=a, b=b: cp.matmul(a, b), flops, "TFLOP/s")
            table.add(f"gemm {name}", "cupy_blas", dtype,
                      lambda a=a, b=b: cupy_blas.matmul(a, b, xp=cp, gemm=cupy_blas.cublas_gemm), flops, "TFLOP/s")


def bench_matmul(table, rng, size=4096):
    mm = launcher("matmul_forward")
    flops = 2 * size**3
    check_a = rng.standard_normal((300, 264))
    check_b = rng.standard_normal((264, 200))
    for dtype in (FLOAT, HALF):
        a = cp.asarray(rng.standard_normal((size, size)), dtype=dtype)
        b = cp.asarray(rng.standard_normal((size, size)), dtype=dtype)
        ca, cb = cp.asarray(check_a, dtype=dtype), cp.asarray(check_b, dtype=dtype)
        ref = ca.get().astype(np.float64) @ cb.get().astype(np.float64)
        base = table.add("matmul", "cuBLAS (cupy.matmul)", dtype, lambda: cp.matmul(a, b), flops, "TFLOP/s")
        cublas_tflops = flops / base / 1e9 if base else None
        table.rows[-1]["pct_peak"] = 100.0 if base else None
        for v, f in mm.VERSIONS.items():
            if v == 0 or dtype.type not in mm.DTYPES[v]:
                continue
            atol = 1e-3 if dtype == FLOAT else 5e-2
            table.add("matmul", f"cuda v{v}", dtype, lambda f=f: f(a, b), flops, "TFLOP/s", baseline=base,
                      peak=cublas_tflops, check=lambda f=f: assert_close(f(ca, cb), ref.astype(dtype), "matmul",
                                                                         atol=atol, rtol=1e-2))


def bench_sublayer(table, rng):
    """dropout + add + LayerNorm, both ways, from their own bench files."""
    for op in ("dropout_add_layernorm_forward", "dropout_add_layernorm_backward"):
        importlib.import_module(f"benchmarks.bench_{op}").gpu(table, rng)


def bench_bias(table, rng):
    """bias + ReLU and the bias's backward, from their own bench files."""
    for op in ("bias_relu_forward", "bias_backward"):
        importlib.import_module(f"benchmarks.bench_{op}").gpu(table, rng)


def main(only=""):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="also write the rows to this JSON file")
    parser.add_argument("--only", default=only,
                        help="comma-separated: run only benches whose name contains one of these "
                             "(softmax, layernorm, cross_entropy, adam, embedding_dropout, bf16, matmul, "
                             "sublayer, bias)")
    args = parser.parse_args()
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    print(f"device: {props['name'].decode()}, torch: {torch.__version__ if torch else 'not importable'}")
    table = Table(dram_copy_gbps())
    rng = np.random.default_rng(0)
    for name, bench in [("softmax", bench_softmax), ("layernorm", bench_layernorm),
                        ("cross_entropy", bench_cross_entropy), ("adam", bench_adam),
                        ("embedding_dropout", bench_embedding_and_dropout), ("bf16", bench_bf16),
                        ("matmul", bench_matmul), ("sublayer", bench_sublayer), ("bias", bench_bias)]:
        if any(part in name for part in args.only.split(",")):
            start = time.perf_counter()
            bench(table, rng)
            print(f"[{name}: {time.perf_counter() - start:.1f} s]", flush=True)
            if args.json:   # after each bench, whole (renamed into place): a run stopped at its limit keeps its rows
                with open(f"{args.json}.tmp", "w") as f:
                    json.dump({"dram_copy_gbps": table.peak_gbps, "rows": table.rows}, f, indent=1)
                os.replace(f"{args.json}.tmp", args.json)
    table.print()


if __name__ == "__main__":
    main()
