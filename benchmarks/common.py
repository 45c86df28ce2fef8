"""Shared benchmark helpers: a median timer, bandwidth arithmetic, and a table / JSON printer.

Benchmarks never assert: they print `version | ms | GB/s | speedup vs reference` and the
first-call time (JIT compile, or loading Numba's on-disk cache when it is warm).
"""
import argparse
import json
import statistics
import time

from minitensor import get_backend


def parse_args(description):
    """`--json` prints one JSON object instead of the table; `--repeats` sets the timed calls."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--repeats", type=int, default=10, help="timed calls per version")
    return parser.parse_args()


def first_call_seconds(fn):
    """Wall time of one call: for a Numba kernel this includes compiling or loading the cache."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median_seconds(fn, warmup=2, repeats=10):
    """Median wall time of `repeats` calls after `warmup` untimed ones (the median ignores hiccups)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def gigabytes_per_second(num_bytes, seconds):
    """Effective bandwidth: the bytes the op must move at least once, over the time taken."""
    return num_bytes / seconds / 1e9


def run_table(title, candidates, num_bytes, args, reference="reference"):
    """Time each (name, fn, is_jit) candidate and print a table (or JSON) with speedups.

    num_bytes: minimum bytes moved per call (formula stated in each bench file).
    reference: the candidate name the speedup column divides by.
    """
    get_backend("numba")  # Numba kernels run under the threading layer this backend sets, as in training
    rows = []
    for name, fn, is_jit in candidates:
        first = first_call_seconds(fn) if is_jit else None
        seconds = median_seconds(fn, repeats=args.repeats)
        rows.append({"version": name, "ms": seconds * 1e3,
                     "gb_per_s": gigabytes_per_second(num_bytes, seconds),
                     "first_call_ms": None if first is None else first * 1e3})
    ref_ms = next(r["ms"] for r in rows if r["version"] == reference)
    for row in rows:
        row["speedup_vs_reference"] = ref_ms / row["ms"]
    if args.json:
        print(json.dumps({"benchmark": title, "bytes": num_bytes, "rows": rows}))
        return rows
    print(f"{title}  ({num_bytes / 1e6:.1f} MB moved per call)")
    print(f"{'version':<28} | {'ms':>8} | {'GB/s':>6} | {'speedup':>7} | first call ms")
    for row in rows:
        first = "" if row["first_call_ms"] is None else f"{row['first_call_ms']:.1f}"
        print(f"{row['version']:<28} | {row['ms']:8.3f} | {row['gb_per_s']:6.2f} | "
              f"{row['speedup_vs_reference']:6.2f}x | {first}")
    return rows


def with_version(module, version, fn):
    """fn, run with module.DEFAULT = version: a kernel wrapper that calls VERSIONS[DEFAULT] times that version."""
    def call():
        default, module.DEFAULT = module.DEFAULT, version
        try:
            return fn()
        finally:
            module.DEFAULT = default
    return call


def gpu_rows(table, op, dtype, candidates, num_bytes):
    """Time (version, fn) candidates on the GPU into bench_gpu_kernels' Table, the first as the baseline."""
    baseline = None
    for i, (version, fn) in enumerate(candidates):
        ms = table.add(op, version, dtype, fn, num_bytes, "GB/s", baseline=baseline)
        baseline = ms if i == 0 else baseline
