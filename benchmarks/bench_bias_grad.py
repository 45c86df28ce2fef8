"""The bias gradient of a Linear layer, db = Σ_rows dy, two ways: a leading-axis reduction and 1ᵀ dy.

Shapes are Transformer-base's (Table 3): 25,000 rows of 512 or 2,048 columns; the base step
has 96 of these per update. Runs on the GPU (CuPy) when it is there, else on NumPy.
Both forms must agree; the table prints ms per call and GB/s of dy read.

    PYTHONPATH=. python benchmarks/bench_bias_grad.py [--json]
"""
import json

import numpy as np

from benchmarks.common import median_seconds, parse_args

try:
    import cupy as xp
    from cupyx.profiler import benchmark

    def ms(fn):
        return float(np.median(benchmark(fn, n_repeat=20, n_warmup=3).gpu_times)) * 1e3
except ImportError:  # no CuPy: the same comparison on the CPU
    xp = np

    def ms(fn):
        return median_seconds(fn) * 1e3


def main():
    args = parse_args(__doc__.splitlines()[0])
    rows = []
    for dtype in (np.float32, np.float16):
        for cols in (512, 2048):
            g = xp.asarray(np.random.default_rng(0).standard_normal((25000, cols)), dtype=dtype)
            ones = xp.ones(g.shape[0], dtype=np.float32)
            forms = {"g.sum(axis=0)": lambda: g.sum(axis=0, dtype=np.float32),
                     "1ᵀ g (GEMV)": lambda: xp.matmul(ones, g.astype(np.float32, copy=False))}
            a, b = (xp.asnumpy(f()) if xp is not np else f() for f in forms.values())
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-2)
            for name, fn in forms.items():
                t = ms(fn)
                rows.append({"dtype": np.dtype(dtype).name, "shape": [25000, cols], "form": name, "ms": t,
                             "gb_s": g.nbytes / t / 1e6})
    if args.json:
        print(json.dumps(rows))
        return
    print(f"{'dtype':8s} {'shape':14s} {'form':16s} {'ms':>8s} {'GB/s':>8s}")
    for r in rows:
        print(f"{r['dtype']:8s} {str(tuple(r['shape'])):14s} {r['form']:16s} {r['ms']:8.3f} {r['gb_s']:8.1f}")


if __name__ == "__main__":
    main()
