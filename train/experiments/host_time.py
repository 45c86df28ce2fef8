"""`python -m train bench --host-only`: the host's share of a training step, measured on any machine.

Shapes: B sentences, S source length, T target length, V vocab, D = d_model.

A GPU step is two programs: the Python that decides and launches (autograd, the Functions,
cupy_blas's plans, the launchers) and the kernels it queues. When the Python takes longer than
the kernels, the GPU waits. This runs the real step of a preset at its full size on
minitensor's HostOnlyBackend, which records every device call (launch, bytes, FLOPs, the arrays
made) and computes none, and times what is left: the host's Python. Reported per step:
`host_ms_per_step` (the least process CPU time over the timed steps: the machine's other load
shows in wall time, not in it; the timed steps count launches but tally no bytes, so little of
it is the recording), the wall time beside it, `launches_per_step`, `syncs_per_step`,
launches, GB moved and TFLOP by class of kernel and by kind, and the float32 arrays of B·T
rows of V made in a mixed-precision step (the logits or their gradient in float32; a mixed
step should make none).
"""
from __future__ import annotations

import time

import numpy as np

from minitensor.backends.host_only import HostOnlyBackend
from transformer.config import TransformerConfig

from train.distributed.grad_sync import GradSync
from train.experiments.step_setup import setup
from train.run.step import train_step


def float32_logit_arrays(allocations, rows: int, vocab: int) -> list[tuple]:
    """The float32 arrays among `allocations` that hold rows × vocab numbers laid out (…, V): logits-sized."""
    return [(shape, str(dtype)) for shape, dtype in allocations
            if dtype == np.float32 and len(shape) >= 2 and shape[-1] == vocab and int(np.prod(shape[:-1])) == rows]


def measure(cfg: TransformerConfig, precision: str, B: int, S: int, T: int, steps: int, warmup: int) -> dict:
    """Time `steps` steps (after the first and `warmup` more) of cfg on a HostOnlyBackend; the records of the last."""
    backend = HostOnlyBackend()
    model, opt, loss_fn, scaler, batch = setup(cfg, backend, precision, B, S, T)
    sync = GradSync(opt)                                                   # made once, as fit makes it
    counts = backend.counts
    cpu, wall = [], []
    for i in range(1 + warmup + steps):                                    # timed: counts only, no byte tallies
        counts.detailed = False
        start_wall, start_cpu = time.perf_counter(), time.process_time()
        train_step(model, batch, opt, loss_fn, scaler, sync=sync)
        if i > warmup:
            cpu.append(time.process_time() - start_cpu)
            wall.append(time.perf_counter() - start_wall)
    counts.detailed = True
    counts.clear()
    counts.executed.clear()
    train_step(model, batch, opt, loss_fn, scaler, sync=sync)              # one more, recorded in full
    classes = {name: {"launches": c["launches"], "gb": c["bytes"] / 1e9, "tflop": c["flops"] / 1e12}
               for name, c in counts.by_class().items()}
    kinds = {kind: {"launches": n, "gb": counts.bytes_by_kind.get(kind, 0) / 1e9,
                    "tflop": counts.flops_by_kind.get(kind, 0) / 1e12}
             for kind, n in sorted(counts.by_kind.items(), key=lambda kv: -kv[1])}
    return {"host_ms_per_step": min(cpu) * 1e3, "host_ms_median": float(np.median(cpu)) * 1e3,
            "wall_ms_median": float(np.median(wall)) * 1e3, "launches_per_step": counts.launches,
            "syncs_per_step": counts.syncs, "uploads_per_step": counts.uploads,
            "gb_per_step": sum(c["gb"] for c in classes.values()),
            "tflop_per_step": sum(c["tflop"] for c in classes.values()),
            "by_class": classes, "by_kind": kinds, "executed_on_host": dict(counts.executed),
            "float32_logit_arrays": float32_logit_arrays(counts.allocations, B * T, cfg.vocab_size),
            "timed_steps": steps, "warmup_steps": warmup}


def format_report(r: dict) -> str:
    lines = [f"host-only step, preset {r['preset']} (B×S×T = {'×'.join(map(str, r['batch']))}), {r['precision']}: "
             f"the Python of one step, every device call recorded, none made",
             f"  host {r['host_ms_per_step']:.1f} ms/step (least CPU time of {r['timed_steps']}; median "
             f"{r['host_ms_median']:.1f}, wall median {r['wall_ms_median']:.1f})",
             f"  {r['launches_per_step']} launches, {r['syncs_per_step']} host syncs, {r['uploads_per_step']} uploads; "
             f"{r['gb_per_step']:.1f} GB moved, {r['tflop_per_step']:.2f} TFLOP per step",
             f"  {'class':22s} {'launches':>8s} {'GB':>8s} {'TFLOP':>7s}"]
    lines += [f"  {name:22s} {c['launches']:8d} {c['gb']:8.2f} {c['tflop']:7.2f}" for name, c in r["by_class"].items()]
    lines.append("  largest kinds by launches: " + ", ".join(
        f"{kind} {k['launches']}" for kind, k in list(r["by_kind"].items())[:8]))
    lines.append(f"  float32 arrays of B·T rows of V made: {r['float32_logit_arrays'] or 'none'}")
    if r["executed_on_host"]:
        lines.append(f"  run for real on the host (no shape rule): {r['executed_on_host']}")
    return "\n".join(lines)
