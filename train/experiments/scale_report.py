"""`python -m train scale`: how fast would training run on 1-8 devices? Measured parts, the model, its validation.

    python -m train scale                                  # CPU: the cpu preset's step; MPI between 2 local ranks
    python -m train scale --backend cuda                   # one GPU: the base step at 250×100 tokens (~25k per GPU)
    python -m train scale --preset base --step-ms 176      # project a step measured elsewhere (README: H100, fp16)
    mpiexec -n 8 python -m train scale --backend cuda --allreduce-only   # bus bandwidth, latency, overlap of 8 GPUs

It measures (or takes) the one-device step, measures the link here (bus bandwidth, latency per
call, and how much of an all-reduce hides behind compute), takes the per-batch work of WMT-like
batches at the step's token budget (train/experiments/batch_work.py), and projects with the model
of train/experiments/scale.py; then it prints the model's check against NVIDIA's published A100
run (train/experiments/scale_validation.py) and the wall time of the paper's runs (§5.2) with the
paper's update (§5.1: ~25,000 tokens over 8 devices, 3,125 each).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np

from train.distributed import communicators, launch
from train.errors import InputError
from train.experiments import batch_work, scale_validation
from train.experiments.scale import GRAD_BYTES, LINKS, PAPER_RUNS, PAPER_TOKENS_PER_STEP, Link, parameter_count, project
from train.run.metrics import train_flops
from transformer.config import TransformerConfig

DEVICES = 8                          # §5.2: one machine with 8 GPUs


# ------------------------------------------------------------------ measurements
def _timed(fn, synchronize, times: int) -> float:
    fn()                                                                       # warm-up: buffers, connections
    synchronize()
    start = time.perf_counter()
    for _ in range(times):
        fn()
    synchronize()
    return (time.perf_counter() - start) / times


def measure_allreduce(comm, xp, synchronize, nbytes: int = 64 * 2**20, repeats: int = 5) -> dict:
    """Bus bandwidth, latency per call and overlap of comm's all-reduce over its ranks (float32, in place).

    Overlap: an all-reduce started (all_reduce_async) before matmuls of about its own duration and
    waited for after them; the part of it that did not add to the time ran hidden: (t_ar + t_mm − t_both) / t_ar.
    """
    n = comm.world_size
    array = xp.ones(nbytes // 4, dtype=np.float32)
    comm.barrier()
    seconds = _timed(lambda: comm.all_reduce(array), synchronize, repeats)
    latency = _timed(lambda: comm.all_reduce(xp.ones(1, dtype=np.float32)), synchronize, 20)
    a = xp.ones((512, 512), dtype=np.float32)
    one_matmul = _timed(lambda: a @ a, synchronize, 5)
    count = max(1, int(round(seconds / one_matmul)))

    def matmuls():
        for _ in range(count):
            a @ a

    def both():
        handle = comm.all_reduce_async(array)
        matmuls()
        handle.wait()

    compute = _timed(matmuls, synchronize, repeats)
    comm.barrier()
    together = _timed(both, synchronize, repeats)
    hidden = (seconds + compute - together) / seconds
    return {"ranks": n, "bytes": nbytes, "seconds": seconds, "latency_us": latency * 1e6,
            "bus_gbps": nbytes / seconds * 2 * (n - 1) / n / 1e9, "overlap": float(np.clip(hidden, 0.0, 1.0)),
            "overlap_raw": float(hidden)}


def host_link(on_gpu: bool) -> tuple[Link | None, float, str]:
    """(the link measured here, its overlap, a note): MPI between 2 local ranks on a CPU; one GPU has no link."""
    if on_gpu:
        return None, 0.0, ("one GPU: no link to measure; run `mpiexec -n 8 python -m train scale --backend cuda "
                           "--allreduce-only` on the node")
    mpiexec = launch.mpiexec_path()
    if mpiexec is None:
        return None, 0.0, "no MPI here (pip install mpi4py mpich to measure a link between local ranks)"
    done = subprocess.run([mpiexec, "-n", "2", sys.executable, "-m", "train", "scale", "--allreduce-only", "--json"],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        return None, 0.0, f"measuring MPI between 2 local ranks failed: {done.stderr.strip().splitlines()[-1:]}"
    m = json.loads(done.stdout.strip().splitlines()[-1])
    return (Link("MPI between 2 local ranks, measured here", m["bus_gbps"], m["latency_us"], at_ranks=2), m["overlap"],
            f"MPI all-reduce between 2 local ranks: {m['bus_gbps']:.2f} GB/s bus bandwidth ({m['bytes'] / 2**20:.0f} MB), "
            f"{m['latency_us']:.0f} µs a call, {100 * m['overlap']:.0f}% hidden behind compute "
            f"(raw {100 * m['overlap_raw']:+.0f}%)")


def allreduce_only(backend: str, as_json: bool) -> dict | None:
    """Under a launcher: measure the all-reduce over every rank (NCCL on GPUs, MPI on CPUs); rank 0 prints it."""
    comm = communicators.for_backend(communicators.host_from_launcher(), backend, timeout_s=600.0)
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
              f"({measured['bytes'] / 2**20:.0f} MB in {measured['seconds'] * 1e3:.2f} ms), latency "
              f"{measured['latency_us']:.0f} µs, {100 * measured['overlap']:.0f}% hidden behind compute")
    return measured


# ------------------------------------------------------------------ the command
def _work(cfg: TransformerConfig, budget: int, lengths):
    """Per-batch work of our batches of WMT news `lengths` (batch_work.newstest_lengths) at `budget` tokens, or None
    without them."""
    if lengths is None:
        return None
    src, tgt = lengths
    return batch_work.batch_work(batch_work.our_batches(src, tgt, budget), src, tgt, cfg)


def run(preset: str, backend: str, step_ms: float | None, batch: int | None, links: list[str], bucket_mb: float,
        accum: int, steps: int, as_json: bool, overlap: float = 0.0) -> dict:
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
    chosen = _links(links, on_gpu, overlap)
    lengths = batch_work.newstest_lengths()                                    # read once: ~0.3 s
    work = _work(cfg, B * max(S, T), lengths)
    result = {"preset": preset, "batch": [B, S, T], "tgt_tokens_per_device": B * T, "step_ms": step_ms,
              "step_source": source, "parameters": parameter_count(cfg), "bucket_mb": bucket_mb, "accum": accum,
              "link_notes": chosen["notes"], "straggler_source": _straggler_source(work), "links": {},
              "paper_runs": {}, "validation": scale_validation.validate(lengths)}
    grad_bytes = result["parameters"] * GRAD_BYTES
    for key, (link, hidden) in chosen["links"].items():
        result["links"][key] = {"name": link.name, "bus_gbps": link.bus_gbps, "latency_us": link.latency_us,
                                "overlap": hidden, "rows": project(accum * step_ms / 1e3, grad_bytes, link, bucket_mb,
                                                                   accum, work, hidden)}
    for name, (paper_cfg, paper_steps) in PAPER_RUNS.items():
        result["paper_runs"][name] = _paper_run(paper_cfg, paper_steps, cfg, step_ms, (B, S, T), chosen, bucket_mb,
                                                lengths)
    print(json.dumps(result) if as_json else format_report(result))
    return result


def command(args) -> int:
    """`python -m train scale`: the options checked, then the all-reduce alone or the whole projection."""
    if args.allreduce_only:
        allreduce_only(args.backend, args.json)
        return 0
    for link in args.link:
        if link not in LINKS and not _is_positive_number(link):
            raise InputError(f"--link must be one of {', '.join(LINKS)} or a bus bandwidth in GB/s, got {link!r}")
    if args.accum < 1 or args.steps < 1 or args.bucket_mb < 0 or (args.step_ms is not None and args.step_ms <= 0):
        raise InputError("--accum and --steps must be at least 1, --bucket-mb 0 or more and --step-ms positive")
    if not 0 <= args.overlap <= 1:
        raise InputError(f"--overlap is a fraction of the all-reduce, between 0 and 1; got {args.overlap}")
    preset = args.preset or ("base" if args.backend in ("cuda", "cupy", "gpu") else "cpu")
    run(preset, args.backend, args.step_ms, args.batch, args.link, args.bucket_mb, args.accum, args.steps, args.json,
        overlap=args.overlap)
    return 0


def _is_positive_number(text: str) -> bool:
    try:
        return float(text) > 0
    except ValueError:
        return False


def _straggler_source(work) -> str:
    if work is None:
        return "no per-batch work distribution (needs ../shared/data/wmt_newstest): no straggler cost modelled"
    return f"per-batch FLOPs of our batches of WMT news lengths (newstest2012-2017, {len(work)} batches)"


def _paper_run(paper_cfg, paper_steps: int, cfg, step_ms: float, shape, chosen, bucket_mb: float, lengths) -> dict:
    """The paper's run (§5.2) on 8 devices with its update (§5.1): 25,000 tokens, 3,125 on each device.

    The step of 3,125 tokens is the measured step scaled by FLOPs: a small batch uses a GPU less
    well than that, so this is a lower bound on the step, and the efficiency an upper bound.
    """
    B, S, T = shape
    share = PAPER_TOKENS_PER_STEP / DEVICES                                    # target tokens per device
    rows = share / T
    step_s = step_ms / 1e3 * train_flops(paper_cfg, rows * S, rows * T, S, T) / train_flops(cfg, B * S, B * T, S, T)
    work = _work(paper_cfg, int(share), lengths)
    out = {"steps": paper_steps, "parameters": parameter_count(paper_cfg), "tokens_per_device": share,
           "step_1_device_ms": step_s * 1e3, "hours_8_devices": {}, "efficiency_8_devices": {}}
    for key, (link, hidden) in chosen["links"].items():
        row = project(step_s, parameter_count(paper_cfg) * GRAD_BYTES, link, bucket_mb, 1, work, hidden,
                      devices=[DEVICES])[0]
        out["hours_8_devices"][key] = paper_steps * row["step_ms"] / 3.6e6
        out["efficiency_8_devices"][key] = row["efficiency"]
    return out


def _links(keys: list[str], on_gpu: bool, overlap: float) -> dict:
    """{"links": {key: (Link, overlap)}, "notes": [...]}: the measured link (with its measured overlap), then the rest."""
    chosen, notes = {}, []
    if not keys:
        measured, hidden, note = host_link(on_gpu)
        notes.append(note)
        if measured is not None:
            chosen["measured"] = (measured, hidden)
        keys = list(LINKS)
    for key in keys:
        chosen[key] = (LINKS[key] if key in LINKS else Link("given with --link", float(key), 25.0), overlap)
    return {"links": chosen, "notes": notes}


def format_report(r: dict) -> str:
    B, S, T = r["batch"]
    lines = [f"single-device step: {r['step_ms']:.1f} ms, {r['step_source']}; preset {r['preset']}, B×S×T = "
             f"{B}×{S}×{T} ({r['tgt_tokens_per_device']:,} target tokens per device and micro-batch), "
             f"{r['parameters']:,} parameters = {r['parameters'] * GRAD_BYTES / 1e6:.1f} MB of fp32 gradients"]
    lines += [f"link: {note}" for note in r["link_notes"]]
    lines.append(f"straggler: {r['straggler_source']}")
    lines.append(f"projected data-parallel update ({r['bucket_mb']:g} MB buckets, {r['accum']} micro-batch(es) per "
                 f"device; tokens per device fixed; a projection, not a measurement):")
    for link in r["links"].values():
        lines.append(f"  {link['name']}: {link['bus_gbps']:.3g} GB/s bus bandwidth, {link['latency_us']:.0f} µs a call, "
                     f"{100 * link['overlap']:.0f}% of the all-reduce hidden (measured; 0 where not)")
        lines.append(f"    {'n':>2} {'straggler':>9} {'all-reduce':>11} {'step':>10} {'efficiency':>10}   "
                     f"{'no overlap':>10}")
        for row in link["rows"]:
            lines.append(f"    {row['devices']:>2} {100 * (row['straggler'] - 1):>+8.1f}% {row['allreduce_ms']:>8.2f} ms "
                         f"{row['step_ms']:>7.1f} ms {100 * row['efficiency']:>9.1f}%   "
                         f"{100 * row['efficiency_no_overlap']:>9.1f}%")
    lines += scale_validation.format_validation(r["validation"])
    lines.append(f"the paper's runs on {DEVICES} devices with the paper's update (§5.1: {PAPER_TOKENS_PER_STEP:,} tokens, "
                 f"{PAPER_TOKENS_PER_STEP // DEVICES:,} per device; the step scaled by FLOPs from the one above, so "
                 f"a lower bound; paper: base 12 h, big 3.5 days on 8 P100, §5.2):")
    for name, run_ in r["paper_runs"].items():
        lines.append(f"  {name:4s} {run_['steps']:>7,} steps, {run_['parameters'] / 1e6:.0f}M parameters, "
                     f"{run_['step_1_device_ms']:.1f} ms/step on one device:")
        for key, hours in run_["hours_8_devices"].items():
            lines.append(f"       {r['links'][key]['name']}: {hours:,.1f} h "
                         f"({100 * run_['efficiency_8_devices'][key]:.0f}% efficiency)")
    return "\n".join(lines)

