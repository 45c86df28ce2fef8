"""CUDA graphs and cuBLAS plans on the GPU: the proof and the timings (benchmarks/gpu_lease.sh, lane cuda_graph).

1. cuBLAS planning: host µs per product through cupy_blas, planned on every call vs replayed from
   the plan dict (a Linear of the base step, bf16 (25000, 512) @ (512, 512)).
2. A CUDA graph of Transformer-base's forward and backward (bf16, fused ops, dropout off, one fixed
   batch shape; minitensor.backends.cuda_graph.GraphedCall): captured once, replayed; the gradients
   of every parameter against the eager ones, on the capture's batch and on a new one; GPU ms and
   host ms (cupyx.profiler.benchmark's CPU time: the Python that queues the work) eager vs replayed.
3. What a replay would get wrong is refused or ordered: a function that reads a value on the host,
   one with dropout on (its seed is a host number) and one that uploads from the host each run
   eagerly, said once, with fresh values on every call; an input still being written on the caller's
   stream (by a large product) is what the capture's warm-up sees.
What a whole training update needs before it can be captured (device-resident dropout seeds,
learning rate, step and token counts; inputs copied into fixed buffers) is listed in docs/gpu_step.md.

    PYTHONPATH=. python benchmarks/bench_cuda_graph.py [--batch 250] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import time

import cupy as cp
import numpy as np
from cupyx.profiler import benchmark

import minitensor as mt
from minitensor.autograd import backward
from minitensor.backends import cupy_blas
from minitensor.backends.cuda_graph import GraphedCall
from minitensor.dtypes import BF16
from minitensor.kernels.bf16_cast.reference import float_to_bf16
from transformer.config import TransformerConfig
from transformer.model import Transformer


def times(fn, repeats=10):
    """(host ms, GPU ms) medians of fn: the CPU time to queue it, the GPU time it runs."""
    result = benchmark(fn, n_repeat=repeats, n_warmup=2)
    return float(np.median(result.cpu_times)) * 1e3, float(np.median(result.gpu_times[0])) * 1e3


def planning(report):
    backend = mt.get_backend("cuda")
    rng = np.random.default_rng(0)
    a = cp.asarray(float_to_bf16(rng.standard_normal((25000, 512))))
    b = cp.asarray(float_to_bf16(rng.standard_normal((512, 512))))
    for name, plans in (("planned every call", None), ("replayed from plans", {})):
        def call(plans=plans):
            for _ in range(100):
                cupy_blas.matmul(a, b, xp=cp, gemm=backend.gemm, plans=plans)
        host_ms, _ = times(call, repeats=5)
        report[f"cublas_call_host_us {name}"] = host_ms * 10        # per product: 100 of them per call
        print(f"one cuBLAS product, host µs, {name}: {host_ms * 10:.1f}", flush=True)


def graph(report, batch):
    backend = mt.get_backend("cuda")
    cfg = TransformerConfig(impl="fused", p_drop=0.0)
    model = Transformer(cfg, np.random.default_rng(0), backend="cuda", precision="bf16")
    params = [p for _, p in model.named_parameters()]

    def batch_of(seed):
        r = np.random.default_rng(seed)
        return (cp.asarray(r.integers(4, cfg.vocab_size, (batch, 100))), cp.asarray(r.integers(4, cfg.vocab_size, (batch, 100))))

    noise = cp.random.default_rng(1).standard_normal((batch, 100, cfg.vocab_size), dtype=cp.float32)
    cotangent = backend.cast(noise * 1e-4, BF16)                  # made on the GPU: 925M numbers take the host ~20 s
    del noise

    def step(src, tgt_in, grad):
        for p in params:
            p.grad = None
        logits = model(src, tgt_in)                                   # (B, T, V) bf16
        backward(logits, grad)
        return [p.grad for p in params]

    graphed = GraphedCall(step, backend, log=lambda line: print(line, flush=True))
    for name, seed in (("the capture's batch", 2), ("a new batch", 3)):
        src, tgt_in = batch_of(seed)
        eager = [g.copy() for g in step(src, tgt_in, cotangent)]
        start = time.perf_counter()
        replayed = graphed(src, tgt_in, cotangent)
        cp.cuda.Device().synchronize()
        worst = max(float(cp.abs(r - e).max() / (cp.abs(e).max() + 1e-30)) for r, e in zip(replayed, eager))
        report[f"graph_vs_eager_max_rel_diff {name}"] = worst
        print(f"graph vs eager gradients, {name}: max |diff| / max |eager| = {worst:.2e} "
              f"({time.perf_counter() - start:.2f} s incl. capture)", flush=True)
    report["graph_captured"] = graphed.failure is None
    src, tgt_in = batch_of(2)
    for name, fn in (("eager", lambda: step(src, tgt_in, cotangent)), ("graph", lambda: graphed(src, tgt_in, cotangent))):
        host_ms, gpu_ms = times(fn)
        report[f"fwd_bwd_{name}_host_ms"], report[f"fwd_bwd_{name}_gpu_ms"] = host_ms, gpu_ms
        print(f"base forward + backward (bf16, B={batch}), {name}: host {host_ms:.2f} ms, GPU {gpu_ms:.2f} ms", flush=True)


def fallback(report):
    said = []
    graphed = GraphedCall(lambda a: a * float(a.sum()), mt.get_backend("cuda"), log=said.append)
    x = cp.ones(4, dtype=cp.float32)
    results = [float(graphed(x)[0]) for _ in range(3)]
    report["fallback_said_once"] = len(said) == 1 and results == [4.0] * 3
    print(f"a host read inside: {said[0] if said else 'captured?!'}; said {len(said)} time(s), results {results}",
          flush=True)


def hazards(report):
    backend = mt.get_backend("cuda")
    dropout = mt.nn.Dropout(0.1, rng=np.random.default_rng(0))
    x = cp.ones(1 << 20, dtype=cp.float32)
    for name, fn in (("dropout", lambda a: dropout(mt.Tensor(a, backend="cuda")).data),
                     ("upload", lambda a: a + backend.asarray(np.random.default_rng().random(1, dtype=np.float32)))):
        said = []
        graphed = GraphedCall(fn, backend, log=said.append)
        first, second = (graphed(x).copy() for _ in range(2))
        fresh = not bool(cp.array_equal(first, second))
        report[f"{name}_refused_said_once_fresh_values"] = len(said) == 1 and fresh
        print(f"{name}: {said[0] if said else 'captured?!'}; said {len(said)} time(s), fresh values each call: {fresh}",
              flush=True)
    big = cp.random.default_rng(2).standard_normal((8192, 8192), dtype=cp.float32)
    total = cp.zeros((8192, 8192), dtype=cp.float32)

    def accumulate(a):                                  # a side effect: every run of fn, the warm-up's too, adds a
        total[...] += a
        return total

    written = big @ big                                 # ~10 ms still running on the caller's stream
    GraphedCall(accumulate, backend)(written)
    cp.cuda.Device().synchronize()
    worst = float(cp.abs(total - 2 * written).max() / cp.abs(written).max())   # warm-up + replay: 2 written
    report["capture_waits_for_its_inputs_max_rel_diff"] = worst
    print(f"capture after an unfinished producer: max |total - 2 written| / max |written| = {worst:.1e}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=250, help="sentences of 100 tokens per side (default 250)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args()
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    report = {"device": props["name"].decode(), "batch": args.batch, "dtype": str(BF16)}
    for part in (planning, lambda r: graph(r, args.batch), fallback, hazards):
        try:
            part(report)
        except Exception as exc:  # noqa: BLE001 - a failing part is reported, the others still run
            print(f"!! {type(exc).__name__}: {str(exc)[:400]}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
