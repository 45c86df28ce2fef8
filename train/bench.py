"""`python -m train bench`: time one training step of our Transformer, and of a PyTorch peer in the same run.

Shapes: B sentences, S source length, T target length, V vocab.

Presets (what the issues measure):
  base  Table 3 "base" on the GPU: 37k shared vocab, 250 × 100 tokens per side (§5.1's ~25k target tokens)
  cpu   d_model 256, 3+3 layers, 4 heads, d_ff 1024, 8k vocab, 64 × 32 tokens per side

One step = forward, label-smoothed loss (§5.4), backward, Adam (§5.3) with the
Noam rate (§5.3, Eq. (3)); mixed precision adds the loss scaler. The peer is
`benchmarks/torch_peer.py`, run in a subprocess when torch imports, so the
package itself never imports torch. Benchmarks report; they never assert.
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

import numpy as np

from minitensor import Function, optim
from transformer.config import TransformerConfig
from transformer.loss import LabelSmoothingLoss
from transformer.model import Transformer

from .errors import InputError
from .loss_scaler import DynamicLossScaler
from .metrics import mfu, peak_tflops, train_flops
from .step import train_step

PRESETS = {  # the fused ops (impl = "fused"), as the CLI configs train
    "base": dict(model=dict(impl="fused"), batch=250, src_len=100, tgt_len=100),
    "cpu": dict(model=dict(vocab_size=8000, N=3, d_model=256, h=4, d_ff=1024, impl="fused"), batch=64,
                src_len=32, tgt_len=32),
}
PEER_SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "torch_peer.py"


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
    rng = np.random.default_rng(0)
    model = Transformer(cfg, rng, backend=backend, precision=precision)
    be = model.backend
    opt = optim.Adam(model.named_parameters(), lr=optim.NoamSchedule(cfg.d_model, 4000),
                     betas=(0.9, 0.98), eps=1e-9)
    loss_fn = LabelSmoothingLoss(cfg.eps_ls, cfg.pad_id, cfg.impl)
    scaler = DynamicLossScaler() if precision == "fp16" else None
    data = np.random.default_rng(1)
    src = data.integers(4, cfg.vocab_size, (B, S))
    tgt = data.integers(4, cfg.vocab_size, (B, T + 1))
    batch = [(src, tgt[:, :-1], tgt[:, 1:])]                               # the one batch of every step
    timings = {"adam": 0.0}
    adam_step = opt.step

    def timed_adam():
        start = time.perf_counter()
        adam_step()
        timings["adam"] += time.perf_counter() - start

    opt.step = timed_adam                                                  # Adam's share of the profile

    def step():
        return train_step(model, batch, opt, loss_fn, scaler)

    compile_start = time.perf_counter()
    step()                                                                 # first call: JIT compiles, allocations
    be.synchronize()
    first_step_s = time.perf_counter() - compile_start
    for _ in range(warmup):
        step()
    be.synchronize()
    if be.device == "cuda":
        import cupy
        cupy.get_default_memory_pool().free_all_blocks()
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
    if profiler:
        breakdown = {k: v / steps * 1e3 for k, v in profiler.seconds.items()}
        breakdown["Adam.step"] = timings["adam"] / steps * 1e3
        result["op_ms"] = dict(sorted(breakdown.items(), key=lambda kv: -kv[1]))
    return result


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


def bench_peer(cfg: TransformerConfig, device: str, precision: str, B: int, S: int, T: int,
               steps: int, warmup: int) -> dict | None:
    """Run the PyTorch peer in a subprocess; None when torch or the script is not there."""
    if not PEER_SCRIPT.exists():
        return None
    probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True)
    if probe.returncode != 0:
        return None
    peer_precision = {"fp16": "bf16"}.get(precision, precision)          # the peer: bf16 autocast
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
        as_json: bool = False) -> dict:
    spec = PRESETS[preset]
    backend = "cuda" if backend in ("cuda", "gpu", "cupy") else backend
    if precision != "fp32" and backend != "cuda":
        raise InputError(f"--precision {precision} is mixed precision for GPUs; use fp32 on the CPU")
    cfg = TransformerConfig(**spec["model"])
    B, S, T = batch or spec["batch"], spec["src_len"], spec["tgt_len"]
    profile = (backend != "cuda") if profile is None else profile
    ours = bench_ours(cfg, backend, precision, B, S, T, steps, warmup, profile)
    result = dict(ours, preset=preset, batch=[B, S, T])
    if not peer:
        result["peer_error"] = "not asked for (--no-peer)"
    else:
        theirs = bench_peer(cfg, "cuda" if backend == "cuda" else "cpu", precision, B, S, T, steps, warmup)
        if theirs and "step_ms" in theirs:
            result.update(peer_step_ms=theirs["step_ms"], peer_tgt_tok_s=theirs["tgt_tok_s"],
                          peer_peak_mem_bytes=theirs["peak_mem_bytes"], peer_precision=theirs["precision"],
                          ratio=theirs["step_ms"] / ours["step_ms"])  # > 1: we are faster
        elif theirs:
            result["peer_error"] = theirs["error"]
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
    if "peer_step_ms" in r:
        lines.append(f"  torch: {r['peer_step_ms']:8.1f} ms/step  {r['peer_tgt_tok_s']:10.0f} tgt tok/s  "
                     f"peak {gib(r['peer_peak_mem_bytes'])}  ({r['peer_precision']})")
        lines.append(f"  ratio (torch ms / ours ms): {r['ratio']:.2f}  ({'we are faster' if r['ratio'] >= 1 else 'torch is faster'})")
    elif "peer_error" in r:
        lines.append(f"  torch peer not run: {r['peer_error']}")
    else:
        lines.append("  torch peer: not run (torch not importable)")
    if r.get("op_ms"):
        lines.append("  per-op time (ms/step):")
        lines += [f"    {name:28s} {ms:8.2f}" for name, ms in list(r["op_ms"].items())[:15]]
    return "\n".join(lines)
