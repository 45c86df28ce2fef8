"""`python -m train bench`: time one training step of our Transformer, and of a PyTorch peer in the same run.

Shapes: B sentences, S source length, T target length, V vocab.

Presets:
  base  Table 3 "base" on the GPU: 37k shared vocab, 250 × 100 tokens per side (§5.1's ~25k target tokens)
  cpu   d_model 256, 3+3 layers, 4 heads, d_ff 1024, 8k vocab, 64 × 32 tokens per side
  multi30k_cpu  configs/multi30k_cpu.toml's model (d_model 128, 2+2 layers, 4 heads, d_ff 512) at its former 4k vocab,
        128 × 16 tokens per side (its 2,048-token batches of Multi30k's ~15-token sentences)

One step (step_setup.py) = forward, label-smoothed loss (§5.4), backward, Adam (§5.3) with the
Noam rate (§5.3, Eq. (3)); fp16 mixed precision adds the loss scaler, bf16 needs none.
Timing: the first step (compiles, allocations) and `warmup` more run untimed, then `steps`
timed ones; the memory pool is never emptied, so no timed step pays for fresh allocations.
The peers are `benchmarks/torch_peer.py`, run in subprocesses when torch imports (so the
package itself never imports torch): bf16 autocast for our fp16/bf16, fp32 and TF32 for our
fp32. `launches_per_step` and `syncs_per_step` come from the counting backend
(minitensor/backends/counting.py) running the same structure at a tiny width on the CPU:
the model of what CuPy launches, to set beside a GPU profile. Benchmarks report; they never assert.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import minitensor as mt
from minitensor import Function
from minitensor.backends.counting import CountingBackend
from transformer.config import TransformerConfig

from train.distributed.grad_sync import GradSync
from train.errors import InputError
from train.experiments import host_time
from train.experiments.step_setup import setup
from train.run.metrics import mfu, peak_tflops, train_flops
from train.run.step import train_step

PRESETS = {  # the fused ops (impl = "fused"), as the CLI configs train
    "base": dict(model=dict(impl="fused"), batch=250, src_len=100, tgt_len=100),
    "cpu": dict(model=dict(vocab_size=8000, N=3, d_model=256, h=4, d_ff=1024, impl="fused"), batch=64,
                src_len=32, tgt_len=32),
    "multi30k_cpu": dict(model=dict(vocab_size=4000, N=2, d_model=128, h=4, d_ff=512, impl="fused"), batch=128,
                         src_len=16, tgt_len=16),
}
PEER_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "torch_peer.py"


class OpProfiler:
    """Wall time per Function (forward and backward) during a block: the CPU step's breakdown.

    It wraps each Function's static forward/backward for the duration of the
    `with` block and restores them afterwards; results are per step.
    """

    def __init__(self, sync=lambda: None):
        self.seconds = defaultdict(float)
        self.sync = sync                                  # on a GPU: wait for each op, so its time is its own
        self._saved = []

    def __enter__(self):
        for cls in _all_functions(Function):
            for direction in ("forward", "backward"):
                original = cls.__dict__[direction]
                self._saved.append((cls, direction, original))
                setattr(cls, direction, staticmethod(self._timed(f"{cls.__name__}.{direction}", original.__func__)))
        return self

    def _timed(self, key, fn):
        def wrapper(*args, **kwargs):
            self.sync()
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.sync()
                self.seconds[key] += time.perf_counter() - start
        return wrapper

    def __exit__(self, *exc):
        for cls, direction, original in self._saved:
            setattr(cls, direction, original)


def _all_functions(cls) -> list[type]:
    """Every Function subclass defined so far (minitensor's and transformer/fused.py's)."""
    found = []
    for sub in cls.__subclasses__():
        found += [sub] + _all_functions(sub)
    return found


def bench_ours(cfg: TransformerConfig, backend: str, precision: str, B: int, S: int, T: int,
               steps: int, warmup: int, profile: bool) -> dict:
    model, opt, loss_fn, scaler, batch = setup(cfg, backend, precision, B, S, T)
    be = model.backend
    timings = {"adam": 0.0}
    adam_step = opt.step

    def timed_adam():
        start = time.perf_counter()
        adam_step()
        timings["adam"] += time.perf_counter() - start

    opt.step = timed_adam                                                  # Adam's share of the profile

    sync = GradSync(opt)                                                   # made once, as fit makes it

    def step():
        return train_step(model, batch, opt, loss_fn, scaler, sync=sync)

    compile_start = time.perf_counter()
    step()                                                                 # first call: JIT compiles, allocations
    be.synchronize()
    first_step_s = time.perf_counter() - compile_start
    for _ in range(warmup):
        step()
    be.synchronize()                                                       # the pool keeps its blocks
    timings["adam"] = 0.0
    profiler = OpProfiler(be.synchronize) if profile else None
    start = time.perf_counter()
    if profiler:
        profiler.__enter__()
    try:
        for _ in range(steps):
            out = step()
        be.synchronize()
    finally:
        if profiler:
            profiler.__exit__(None, None, None)
    step_s = (time.perf_counter() - start) / steps
    result = {
        "impl": "minitensor", "backend": be.name, "precision": precision, "step_ms": step_s * 1e3,
        "tgt_tok_s": B * T / step_s, "src_tok_s": B * S / step_s, "first_step_s": first_step_s,
        "loss": float(out.loss_sum) / out.tgt_tokens, "peak_mem_bytes": _peak_memory(be),
        "flops_per_step": train_flops(cfg, B * S, B * T, S, T),
    }
    peak, _ = peak_tflops(_device_name(be), precision)
    result["mfu"] = mfu(result["flops_per_step"] / step_s, peak)
    result.update(count_launches(cfg, precision), warmup_steps=warmup, timed_steps=steps)
    if profiler:
        breakdown = {k: v / steps * 1e3 for k, v in profiler.seconds.items()}
        breakdown["Adam.step"] = timings["adam"] / steps * 1e3
        result["op_ms"] = dict(sorted(breakdown.items(), key=lambda kv: -kv[1]))
    return result


def count_launches(cfg: TransformerConfig, precision: str) -> dict:
    """Launches and syncs of one step of cfg's structure as CuPy would run it (counting backend).

    The counts depend on the structure (layers, heads, fused or composed ops), not on the widths,
    so the model is built 2 units wide per head with a 64-token vocabulary: seconds on a CPU.
    """
    tiny = cfg.replace(d_model=2 * cfg.h, d_ff=4 * cfg.h, d_k=None, d_v=None, vocab_size=64)
    backend = CountingBackend()
    model, opt, loss_fn, scaler, batch = setup(tiny, backend, precision, 2, 5, 5)
    train_step(model, batch, opt, loss_fn, scaler)                         # the first step fills caches
    backend.counts.clear()
    train_step(model, batch, opt, loss_fn, scaler)
    counts = backend.counts.snapshot()
    return {"launches_per_step": counts["launches"], "syncs_per_step": counts["syncs"],
            "launches_by_kind": counts["by_kind"]}


def _device_name(backend) -> str:
    if backend.device == "cuda":
        import cupy
        return cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    return "cpu"


def _peak_memory(backend) -> int:
    if backend.device == "cuda":
        import cupy
        return int(cupy.get_default_memory_pool().total_bytes())        # the pool's high-water mark
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


PEERS = {"fp32": ("fp32", "tf32"), "fp16": ("bf16",), "bf16": ("bf16",)}   # ours -> the peers' precisions


def bench_peer(cfg: TransformerConfig, device: str, peer_precision: str, B: int, S: int, T: int,
               steps: int, warmup: int) -> dict | None:
    """Run the PyTorch peer in a subprocess; None when torch or the script is not there."""
    if not PEER_SCRIPT.exists():
        return None
    probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True)
    if probe.returncode != 0:
        return None
    cmd = [sys.executable, str(PEER_SCRIPT), "--device", device, "--precision", peer_precision,
           "--vocab", str(cfg.vocab_size), "--d-model", str(cfg.d_model), "--layers", str(cfg.N),
           "--heads", str(cfg.h), "--d-ff", str(cfg.d_ff), "--batch", str(B), "--src-len", str(S),
           "--tgt-len", str(T), "--steps", str(steps), "--warmup", str(warmup)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "peer failed"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(preset: str = "cpu", backend: str = "cpu", precision: str = "fp32", steps: int = 5,
        warmup: int = 2, peer: bool = True, profile: bool | None = None, batch: int | None = None,
        as_json: bool = False, host_only: bool = False) -> dict:
    spec = PRESETS[preset]
    backend = "cuda" if backend in ("cuda", "gpu", "cupy") else backend
    for flag, value, least in (("--steps", steps, 1), ("--warmup", warmup, 0), ("--batch", batch or 0, 0)):
        if value < least:  # --steps 0 timed nothing (and divided by it); --batch 0 is the preset's
            raise InputError(f"{flag} must be {'at least 1' if least else '0 or more'}, got {value}")
    if precision not in PEERS:
        raise InputError(f"--precision must be one of {sorted(PEERS)}, got {precision!r}")
    if precision != "fp32" and backend != "cuda":
        raise InputError(f"--precision {precision} is mixed precision for GPUs; use fp32 on the CPU")
    cfg = TransformerConfig(**spec["model"])
    B, S, T = batch or spec["batch"], spec["src_len"], spec["tgt_len"]
    if host_only:                                                          # no device needed: nothing runs on one
        if backend != "cuda":
            raise InputError("--host-only measures the host's side of a GPU step: use it with --backend cuda")
        result = dict(host_time.measure(cfg, precision, B, S, T, steps, warmup), preset=preset, batch=[B, S, T],
                      precision=precision)
        print(json.dumps(result) if as_json else host_time.format_report(result))
        return result
    if not mt.available(backend):
        raise InputError(f"--backend {backend} is not available here: {mt.why_unavailable(backend)} "
                         f"(see `python -m train doctor`)")
    profile = (backend != "cuda") if profile is None else profile
    ours = bench_ours(cfg, backend, precision, B, S, T, steps, warmup, profile)
    result = dict(ours, preset=preset, batch=[B, S, T])
    if not peer:
        result["peer_error"] = "not asked for (--no-peer)"
    else:
        peers = PEERS[precision] if backend == "cuda" else ("fp32",)       # TF32 is a GPU mode
        for i, peer_precision in enumerate(peers):
            theirs = bench_peer(cfg, "cuda" if backend == "cuda" else "cpu", peer_precision, B, S, T, steps, warmup)
            key = "peer" if i == 0 else f"peer_{peer_precision}"           # the first is the one `ratio` is against
            if theirs and "step_ms" in theirs:
                result.update({f"{key}_step_ms": theirs["step_ms"], f"{key}_tgt_tok_s": theirs["tgt_tok_s"],
                               f"{key}_peak_mem_bytes": theirs["peak_mem_bytes"],
                               f"{key}_precision": theirs["precision"],
                               f"{key}_ratio": theirs["step_ms"] / ours["step_ms"]})   # > 1: we are faster
            elif theirs:
                result[f"{key}_error"] = theirs["error"]
        if "peer_ratio" in result:
            result["ratio"] = result["peer_ratio"]
    print(json.dumps(result) if as_json else format_report(result))
    return result


def format_report(r: dict) -> str:
    gib = lambda b: f"{b / 2**30:.2f} GiB" if b else "n/a"
    lines = [f"training step, preset {r['preset']} (B×S×T = {'×'.join(map(str, r['batch']))}), "
             f"backend {r['backend']}, {r['precision']}",
             f"  ours : {r['step_ms']:8.1f} ms/step  {r['tgt_tok_s']:10.0f} tgt tok/s  peak {gib(r['peak_mem_bytes'])}"
             f"  MFU {r['mfu'] * 100:.1f}%" if r.get("mfu") else
             f"  ours : {r['step_ms']:8.1f} ms/step  {r['tgt_tok_s']:10.0f} tgt tok/s  peak {gib(r['peak_mem_bytes'])}",
             f"  first step (JIT compile + allocation): {r['first_step_s']:.2f} s"]
    for key in sorted(k[:-len("_step_ms")] for k in r if k.startswith("peer") and k.endswith("_step_ms")):
        ratio = r[f"{key}_ratio"]
        lines.append(f"  torch: {r[f'{key}_step_ms']:8.1f} ms/step  {r[f'{key}_tgt_tok_s']:10.0f} tgt tok/s  "
                     f"peak {gib(r[f'{key}_peak_mem_bytes'])}  ({r[f'{key}_precision']}): "
                     f"torch ms / ours ms {ratio:.2f} ({'we are faster' if ratio >= 1 else 'torch is faster'})")
    if "launches_per_step" in r:
        lines.append(f"  kernel launches per step {r['launches_per_step']}, host syncs {r['syncs_per_step']} "
                     f"(counting backend: CuPy's launches, modelled on the CPU)")
    if "peer_step_ms" not in r:
        lines.append(f"  torch peer not run: {r.get('peer_error', 'torch not importable')}")
    if r.get("op_ms"):
        lines.append("  per-op time (ms/step):")
        lines += [f"    {name:28s} {ms:8.2f}" for name, ms in list(r["op_ms"].items())[:15]]
    return "\n".join(lines)
