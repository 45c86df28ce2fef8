"""`python -m train scale`: how fast would training run on 1-8 GPUs? A measured step, a measured all-reduce, a model.

    python -m train scale                                  # CPU: the cpu preset's step; MPI between 2 local ranks
    python -m train scale --backend cuda                   # one GPU: the base step at 250×100 tokens (~25k per GPU)
    python -m train scale --preset base --step-ms 176      # project a step measured elsewhere (README: H100, fp16)
    mpiexec -n 8 python -m train scale --backend cuda --allreduce-only   # the bus bandwidth of 8 real GPUs

Data parallelism adds one all-reduce of the fp32 gradient per update (train/distributed/grad_sync.py);
the rest of the step is the single-device step. The model, per update with n devices:

    ring all-reduce   t_ar(n) = buckets·α + 2(n−1)/n · gradient bytes / bus bandwidth
    no overlap        step(n) = step(1) + t_ar(n)
    overlap           step(n) = step(1) + max(t_ar(n) − backward of the last micro-batch, t_ar of the last bucket)
                      (every bucket but the last can run during backward, taken as 2/3 of the micro-batch's
                      compute; the last starts when backward ends. NCCL's kernels also take some SMs from the
                      backward pass: not modelled, so this is optimistic by a few %.)
    efficiency        step(1) / step(n), the tokens per device fixed (weak scaling)

Bus bandwidth follows nccl-tests (busbw = algbw · 2(n−1)/n), so one number describes a link
for every n. Presets: NVLink 4 through NVSwitch (H100 SXM, ~450 GB/s), PCIe 5 x16 (~64 GB/s).
The projected wall time of the paper's runs (§5.2: base 100k steps, big 300k steps) scales the
measured step to each model by its FLOPs (train/run/metrics.py) when the measured model is another one.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np

from transformer.config import TransformerConfig

from train.distributed import communicators
from train.run.metrics import train_flops

GRAD_BYTES = 4                       # the all-reduced gradient is fp32 (Adam's flat gradient), also in mixed precision
PAPER_RUNS = {"base": (TransformerConfig.base(), 100_000), "big": (TransformerConfig.big(), 300_000)}   # §5.2
PAPER_TOKENS_PER_STEP = 25_000       # §5.1: ~25,000 target tokens per training batch


@dataclass(frozen=True)
class Link:
    name: str
    bus_gbps: float                  # GB/s, nccl-tests' bus bandwidth
    latency_us: float                # per all-reduce call


LINKS = {"nvlink4": Link("NVLink 4 (H100 SXM, NVSwitch), preset", 450.0, 25.0),
         "pcie5": Link("PCIe 5 x16, preset", 64.0, 40.0)}


def parameter_count(c: TransformerConfig) -> int:
    """Weights of a Transformer with config `c` (the same as Transformer(c).num_parameters(), without building it)."""
    d, hk, hv = c.d_model, c.h * c.d_k, c.h * c.d_v
    attention = 2 * (d * hk + hk) + (d * hv + hv) + (hv * d + d)             # W_Q, W_K, W_V, W_O with biases
    ffn = d * c.d_ff + c.d_ff + c.d_ff * d + d                                # §3.3 Eq. (2)
    norm = 2 * d
    final = norm if c.norm == "pre" else 0
    encoder = c.N * (attention + ffn + 2 * norm) + final
    decoder = c.N * (2 * attention + ffn + 3 * norm) + final
    embeddings = c.vocab_size * d * (1 if c.tie_embeddings else 3)            # §3.4: one shared matrix
    positions = 2 * c.max_len * d if c.positional == "learned" else 0
    return encoder + decoder + embeddings + positions


def allreduce_time(n: int, nbytes: float, link: Link, buckets: int) -> float:
    """Seconds of a ring all-reduce of `nbytes` in `buckets` calls over n devices (0 for one device)."""
    if n == 1:
        return 0.0
    return buckets * link.latency_us * 1e-6 + 2 * (n - 1) / n * nbytes / (link.bus_gbps * 1e9)


def project(step_s: float, grad_bytes: float, link: Link, bucket_mb: float = 25.0, accum: int = 1,
            devices=range(1, 9)) -> list[dict]:
    """One row per device count: all-reduce time, exposed time with and without overlap, step, efficiency."""
    buckets = max(1, int(np.ceil(grad_bytes / (bucket_mb * 1e6)))) if bucket_mb > 0 else 1
    last_bucket = grad_bytes - (buckets - 1) * bucket_mb * 1e6 if bucket_mb > 0 else grad_bytes
    backward_last = step_s / accum * 2 / 3
    rows = []
    for n in devices:
        t_ar = allreduce_time(n, grad_bytes, link, buckets)
        exposed = 0.0 if n == 1 else max(t_ar - backward_last, allreduce_time(n, last_bucket, link, 1))
        step = step_s + exposed
        rows.append({"devices": n, "allreduce_ms": t_ar * 1e3, "step_no_overlap_ms": (step_s + t_ar) * 1e3,
                     "step_ms": step * 1e3, "efficiency": step_s / step,
                     "efficiency_no_overlap": step_s / (step_s + t_ar)})
    return rows


# ------------------------------------------------------------------ measurements
def measure_allreduce(comm, xp, synchronize, nbytes: int = 64 * 2**20, repeats: int = 5) -> dict:
    """Bus bandwidth and latency of comm.all_reduce over its ranks (float32, in place)."""
    n = comm.world_size

    def timed(array, times):
        comm.all_reduce(array)                                                 # warm-up: buffers, connections
        synchronize()
        comm.barrier()
        start = time.perf_counter()
        for _ in range(times):
            comm.all_reduce(array)
        synchronize()
        return (time.perf_counter() - start) / times

    seconds = timed(xp.ones(nbytes // 4, dtype=np.float32), repeats)
    latency = timed(xp.ones(1, dtype=np.float32), 20)
    return {"ranks": n, "bytes": nbytes, "seconds": seconds, "latency_us": latency * 1e6,
            "bus_gbps": nbytes / seconds * 2 * (n - 1) / n / 1e9}


def _memcpy_gbps(xp, synchronize, nbytes: int = 256 * 2**20) -> float:
    src = xp.ones(nbytes // 4, dtype=np.float32)
    dst = xp.empty_like(src)
    xp.copyto(dst, src)
    synchronize()
    start = time.perf_counter()
    for _ in range(5):
        xp.copyto(dst, src)
    synchronize()
    return 2 * nbytes * 5 / (time.perf_counter() - start) / 1e9              # read + write


def host_link(on_gpu: bool) -> tuple[Link | None, str]:
    """The link measured on this machine without a launcher: MPI between 2 local ranks (CPU), else an estimate."""
    if on_gpu:
        import cupy
        gbps = _memcpy_gbps(cupy, cupy.cuda.get_current_stream().synchronize)
        return None, (f"one GPU: no link to measure (device copy {gbps:.0f} GB/s bounds it); "
                      f"run `mpiexec -n 8 python -m train scale --backend cuda --allreduce-only` on the node")
    mpiexec = communicators.mpiexec_path()
    if mpiexec is not None:
        done = subprocess.run([mpiexec, "-n", "2", sys.executable, "-m", "train", "scale", "--allreduce-only",
                               "--json"], capture_output=True, text=True, timeout=300)
        if done.returncode == 0:
            measured = json.loads(done.stdout.strip().splitlines()[-1])
            return (Link("MPI between 2 local ranks, measured here", measured["bus_gbps"], measured["latency_us"]),
                    f"MPI all-reduce between 2 local ranks: {measured['bus_gbps']:.2f} GB/s bus bandwidth "
                    f"({measured['bytes'] / 2**20:.0f} MB), {measured['latency_us']:.0f} µs latency")
    gbps = _memcpy_gbps(np, lambda: None)
    return (Link("memcpy / 2, an estimate (no MPI here)", gbps / 2, 20.0),
            f"no MPI here: estimated from memcpy ({gbps:.1f} GB/s) as half of it (a shared-memory all-reduce "
            f"copies each byte about twice); pip install mpi4py mpich to measure")


# ------------------------------------------------------------------ the command
def run(preset: str, backend: str, step_ms: float | None, batch: int | None, links: list[str], bucket_mb: float,
        accum: int, steps: int, as_json: bool) -> dict:
    from train.experiments.bench import PRESETS, bench_ours

    on_gpu = backend in ("cuda", "cupy", "gpu")
    spec = PRESETS[preset]
    cfg = TransformerConfig(**spec["model"])
    B, S, T = batch or spec["batch"], spec["src_len"], spec["tgt_len"]
    if step_ms is None:
        precision = "fp16" if on_gpu else "fp32"
        measured = bench_ours(cfg, "cuda" if on_gpu else backend, precision, B, S, T, steps, 1, profile=False)
        step_ms, source = measured["step_ms"], f"measured here ({measured['backend']}, {precision})"
    else:
        source = "given (--step-ms)"
    link_rows, notes = _links(links, on_gpu)
    result = {"preset": preset, "batch": [B, S, T], "tgt_tokens_per_device": B * T, "step_ms": step_ms,
              "step_source": source, "parameters": parameter_count(cfg), "bucket_mb": bucket_mb, "accum": accum,
              "link_notes": notes, "links": {}, "paper_runs": {}}
    grad_bytes = result["parameters"] * GRAD_BYTES
    for key, link in link_rows.items():
        result["links"][key] = {"name": link.name, "bus_gbps": link.bus_gbps, "latency_us": link.latency_us,
                                "rows": project(step_ms / 1e3, grad_bytes, link, bucket_mb, accum)}
    flops = train_flops(cfg, B * S, B * T, S, T)
    for name, (paper_cfg, paper_steps) in PAPER_RUNS.items():
        step_s = step_ms / 1e3 * train_flops(paper_cfg, B * S, B * T, S, T) / flops
        hours = {key: paper_steps * project(step_s, parameter_count(paper_cfg) * GRAD_BYTES, link, bucket_mb,
                                            accum, devices=[8])[0]["step_ms"] / 3.6e6 for key, link in link_rows.items()}
        same_tokens = PAPER_TOKENS_PER_STEP / (8 * B * T)                   # the paper's tokens in fewer, larger updates
        result["paper_runs"][name] = {
            "steps": paper_steps, "parameters": parameter_count(paper_cfg), "step_1_device_ms": step_s * 1e3,
            "hours_8_devices": hours, "hours_8_devices_paper_tokens": {k: h * same_tokens for k, h in hours.items()}}
    print(json.dumps(result) if as_json else format_report(result))
    return result


def _links(keys: list[str], on_gpu: bool) -> tuple[dict[str, Link], list[str]]:
    chosen, notes = {}, []
    if not keys:
        measured, note = host_link(on_gpu)
        notes.append(note)
        if measured is not None:
            chosen["measured"] = measured
        keys = list(LINKS)
    for key in keys:
        chosen[key] = LINKS[key] if key in LINKS else Link("given with --link", float(key), 25.0)
    return chosen, notes


def allreduce_only(backend: str, as_json: bool) -> dict | None:
    """Under a launcher: measure the all-reduce over every rank (NCCL on GPUs, MPI on CPUs); rank 0 prints it."""
    comm = communicators.for_backend(communicators.host_from_launcher(), backend, 600.0)
    if comm.world_size == 1:
        raise SystemExit("error: --allreduce-only measures between ranks: start it with mpiexec -n K (K >= 2)")
    if backend in ("cuda", "cupy", "gpu"):
        import cupy
        measured = measure_allreduce(comm, cupy, cupy.cuda.get_current_stream().synchronize, 256 * 2**20)
    else:
        measured = measure_allreduce(comm, np, lambda: None)
    if comm.rank == 0:
        print(json.dumps(measured) if as_json else
              f"all-reduce over {measured['ranks']} ranks: {measured['bus_gbps']:.2f} GB/s bus bandwidth "
              f"({measured['bytes'] / 2**20:.0f} MB in {measured['seconds'] * 1e3:.2f} ms), "
              f"latency {measured['latency_us']:.0f} µs")
    return measured


def format_report(r: dict) -> str:
    B, S, T = r["batch"]
    lines = [f"single-device step: {r['step_ms']:.1f} ms, {r['step_source']}; preset {r['preset']}, B×S×T = "
             f"{B}×{S}×{T} ({r['tgt_tokens_per_device']:,} target tokens per device and update), "
             f"{r['parameters']:,} parameters = {r['parameters'] * GRAD_BYTES / 1e6:.1f} MB of fp32 gradients"]
    lines += [f"link: {note}" for note in r["link_notes"]]
    lines.append(f"projected data-parallel update ({r['bucket_mb']:g} MB buckets, {r['accum']} micro-batch(es) "
                 f"per update; tokens per device fixed):")
    for link in r["links"].values():
        lines.append(f"  {link['name']}: {link['bus_gbps']:.3g} GB/s bus bandwidth, {link['latency_us']:.0f} µs a call")
        lines.append(f"    {'n':>2} {'all-reduce':>11} {'step':>11} {'efficiency':>10}   {'no overlap':>11} {'efficiency':>10}")
        for row in link["rows"]:
            lines.append(f"    {row['devices']:>2} {row['allreduce_ms']:>8.2f} ms {row['step_ms']:>8.1f} ms "
                         f"{100 * row['efficiency']:>9.1f}%   {row['step_no_overlap_ms']:>8.1f} ms "
                         f"{100 * row['efficiency_no_overlap']:>9.1f}%")
    lines.append(f"projected wall time of the paper's runs on 8 devices (§5.2; paper: base 12 h, big 3.5 days on 8 P100), "
                 f"the step scaled by FLOPs from the one above; each update holds 8 × {r['tgt_tokens_per_device']:,} "
                 f"target tokens, {8 * r['tgt_tokens_per_device'] / PAPER_TOKENS_PER_STEP:.2g}× the paper's ~25,000, "
                 f"so also the time to train on the paper's number of tokens")
    for name, run_ in r["paper_runs"].items():
        lines.append(f"  {name:4s} {run_['steps']:>7,} steps, {run_['parameters'] / 1e6:.0f}M parameters, "
                     f"{run_['step_1_device_ms']:.0f} ms/step on one device:")
        for key, hours in run_["hours_8_devices"].items():
            lines.append(f"       {r['links'][key]['name']}: {hours:,.1f} h for {run_['steps']:,} steps; "
                         f"{run_['hours_8_devices_paper_tokens'][key]:,.1f} h for the paper's tokens")
    return "\n".join(lines)
