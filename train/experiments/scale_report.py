"""`python -m train scale`: how fast would training run on 1-8 devices (or nodes of them)? Measured parts, the model.

    python -m train scale                                  # CPU: the cpu preset's step; MPI between 2 local ranks
    python -m train scale --backend cuda                   # one GPU: the base step at 250×100 tokens (~25k per GPU)
    python -m train scale --preset base --step-ms 176 --gpu H100 --overlap on --nodes 2   # a step measured elsewhere
                                                           # (docs/results.md: H100, fp16), on 2 nodes of 8 H100s
    python -m train scale --validate                       # the model against the published runs (scale_validation)
    mpiexec -n 8 python -m train scale --backend cuda --allreduce-only   # bus bandwidth, latency, overlap of 8 GPUs

It measures (or takes) the one-device step, measures the link here (bus bandwidth, latency per
call, and how much of an all-reduce hides behind compute), takes the per-batch work of WMT-like
batches at the step's token budget (train/experiments/batch_work.py), and projects with the model
of train/experiments/scale.py (λ from scale_validation.py's fit row); then the wall time of the
paper's runs (§5.2) with the paper's update (§5.1: ~25,000 tokens over all devices, 3,125 each on 8).
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
from train.experiments.scale import (GRAD_BYTES, LINKS, NETWORKS, PAPER_RUNS, PAPER_TOKENS_PER_STEP, Link,
                                     embedding_bytes, node_link, parameter_count, project)
from train.run.metrics import peak_tflops, train_flops
from transformer.config import TransformerConfig


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
        accum: int, steps: int, as_json: bool, overlap: float = 0.0, *, gpu: str | None = None,
        precision: str | None = None, tokens_per_gpu: int | None = None, gpus_per_node: int = 8, nodes: int = 1,
        network_gbps: float = NETWORKS["ib-ndr"], latency_us: float | None = None,
        straggler_scale: float = scale_validation.STRAGGLER_SCALE) -> dict:
    from train.experiments.bench import PRESETS, bench_ours

    on_gpu = backend in ("cuda", "cupy", "gpu")
    spec = PRESETS[preset]
    cfg = TransformerConfig(**spec["model"])
    S, T = spec["src_len"], spec["tgt_len"]
    B = max(1, tokens_per_gpu // max(S, T)) if tokens_per_gpu else batch or spec["batch"]
    precision = precision or ("fp16" if on_gpu or gpu else "fp32")
    if step_ms is None:
        measured = bench_ours(cfg, "cuda" if on_gpu else backend, precision, B, S, T, steps, 1, profile=False)
        step_ms, source = measured["step_ms"], f"measured here ({measured['backend']}, {precision})"
    else:
        source = "given (--step-ms)"
    chosen = _links(links, on_gpu, overlap, gpu, latency_us)
    lengths = batch_work.newstest_lengths()                                    # read once: ~0.3 s
    work = _work(cfg, B * max(S, T), lengths)
    devices = gpus_per_node * nodes
    setup = {"gpu": gpu, "precision": precision, "gpus_per_node": gpus_per_node, "nodes": nodes,
             "network_gbps": network_gbps if nodes > 1 else None, "straggler_scale": straggler_scale,
             "peak_tflops": peak_tflops(gpu, precision)[0] if gpu else None}
    result = {"preset": preset, "batch": [B, S, T], "tgt_tokens_per_device": B * T, "step_ms": step_ms,
              "step_source": source, "parameters": parameter_count(cfg), "bucket_mb": bucket_mb, "accum": accum,
              "setup": setup, "link_notes": chosen["notes"], "straggler_source": _straggler_source(work), "links": {},
              "paper_runs": {}, "validation": _validation_summary(straggler_scale)}
    if setup["peak_tflops"]:
        setup["mfu"] = train_flops(cfg, B * S, B * T, S, T) * accum / (step_ms / 1e3) / (setup["peak_tflops"] * 1e12)
    grad_bytes = result["parameters"] * GRAD_BYTES
    model = {"straggler_scale": straggler_scale, "last_bucket_at_least": embedding_bytes(cfg),
             "gpus_per_node": gpus_per_node, "network_gbps": network_gbps if nodes > 1 else None}
    counts = [n for n in range(1, gpus_per_node + 1)] + [k * gpus_per_node for k in range(2, nodes + 1)]
    for key, (link, hidden) in chosen["links"].items():
        result["links"][key] = {"name": link.name, "bus_gbps": link.bus_gbps, "latency_us": link.latency_us,
                                "overlap": hidden, "rows": project(accum * step_ms / 1e3, grad_bytes, link, bucket_mb,
                                                                   accum, work, hidden, counts, **model)}
    for name, (paper_cfg, paper_steps) in PAPER_RUNS.items():
        result["paper_runs"][name] = _paper_run(paper_cfg, paper_steps, cfg, step_ms, (B, S, T), chosen, bucket_mb,
                                                lengths, devices, model)
    print(json.dumps(result) if as_json else format_report(result))
    return result


def command(args) -> int:
    """`python -m train scale`: the options checked, then the all-reduce alone, the validation or the projection."""
    if args.allreduce_only:
        allreduce_only(args.backend, args.json)
        return 0
    straggler_scale = scale_validation.STRAGGLER_SCALE if args.straggler_scale is None else args.straggler_scale
    if args.validate:
        v = scale_validation.validate(straggler_scale)
        print(json.dumps({"rows": v["rows"], "held_out_mae": v["held_out_mae"]}) if args.json
              else "\n".join(scale_validation.format_validation(v)))
        return 0
    for link in args.link:
        if link not in LINKS and not _is_positive_number(link):
            raise InputError(f"--link must be one of {', '.join(LINKS)} or a bus bandwidth in GB/s, got {link!r}")
    if args.network not in NETWORKS and not _is_positive_number(args.network):
        raise InputError(f"--network must be one of {', '.join(NETWORKS)} or GB/s a node sends, got {args.network!r}")
    if args.accum < 1 or args.steps < 1 or args.bucket_mb < 0 or (args.step_ms is not None and args.step_ms <= 0):
        raise InputError("--accum and --steps must be at least 1, --bucket-mb 0 or more and --step-ms positive")
    if args.gpus_per_node < 1 or args.nodes < 1 or (args.tokens_per_gpu is not None and args.tokens_per_gpu < 1):
        raise InputError("--gpus-per-node, --nodes and --tokens-per-gpu must be at least 1")
    if (args.latency_us is not None and args.latency_us < 0) or straggler_scale < 0:
        raise InputError("--latency-us and --straggler-scale must be 0 or more")
    if args.batch is not None and args.tokens_per_gpu is not None:
        raise InputError("--batch and --tokens-per-gpu both set the batch: give one")
    overlap = _overlap(args.overlap)
    preset = args.preset or ("base" if args.backend in ("cuda", "cupy", "gpu") else "cpu")
    network = NETWORKS.get(args.network) or float(args.network)
    run(preset, args.backend, args.step_ms, args.batch, args.link, args.bucket_mb, args.accum, args.steps, args.json,
        overlap=overlap, gpu=args.gpu, precision=args.precision, tokens_per_gpu=args.tokens_per_gpu,
        gpus_per_node=args.gpus_per_node, nodes=args.nodes, network_gbps=network, latency_us=args.latency_us,
        straggler_scale=straggler_scale)
    return 0


def _validation_summary(straggler_scale: float) -> dict:
    v = scale_validation.validate(straggler_scale)
    held_out = [r for r in v["rows"] if r["role"] == "held-out" and r["covered"]]
    return {"fit": v["fit"], "held_out_mae": v["held_out_mae"], "held_out_rows": len(held_out),
            "held_out_max": 100 * max(abs(r["predicted"] - r["published"]) for r in held_out)}


def _overlap(text: str) -> float:
    """--overlap: on (every bucket but the last hidden behind backward), off, or a measured fraction."""
    if text in ("on", "off"):
        return 1.0 if text == "on" else 0.0
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise InputError(f"--overlap is on, off or the fraction of the all-reduce hidden, between 0 and 1; got {text}")
    return value


def _is_positive_number(text: str) -> bool:
    try:
        return float(text) > 0
    except ValueError:
        return False


def _straggler_source(work) -> str:
    if work is None:
        return "no per-batch work distribution (needs ../shared/data/wmt_newstest): no straggler cost modelled"
    return f"per-batch FLOPs of our batches of WMT news lengths (newstest2012-2017, {len(work)} batches)"


def _paper_run(paper_cfg, paper_steps: int, cfg, step_ms: float, shape, chosen, bucket_mb: float, lengths,
               devices: int, model: dict) -> dict:
    """The paper's run (§5.2) on `devices` devices with its update (§5.1): 25,000 tokens, 3,125 each on 8.

    The step of a device's share is the measured step scaled by FLOPs: a small batch uses a GPU less
    well than that, so this is a lower bound on the step, and the efficiency an upper bound.
    """
    B, S, T = shape
    share = PAPER_TOKENS_PER_STEP / devices                                    # target tokens per device
    rows = share / T
    step_s = step_ms / 1e3 * train_flops(paper_cfg, rows * S, rows * T, S, T) / train_flops(cfg, B * S, B * T, S, T)
    work = _work(paper_cfg, int(share), lengths)
    out = {"steps": paper_steps, "parameters": parameter_count(paper_cfg), "devices": devices, "tokens_per_device": share,
           "step_1_device_ms": step_s * 1e3, "hours": {}, "efficiency": {}}
    for key, (link, hidden) in chosen["links"].items():
        row = project(step_s, parameter_count(paper_cfg) * GRAD_BYTES, link, bucket_mb, 1, work, hidden,
                      devices=[devices], **{**model, "last_bucket_at_least": embedding_bytes(paper_cfg)})[0]
        out["hours"][key] = paper_steps * row["step_ms"] / 3.6e6
        out["efficiency"][key] = row["efficiency"]
    return out


def _links(keys: list[str], on_gpu: bool, overlap: float, gpu: str | None = None,
           latency_us: float | None = None) -> dict:
    """{"links": {key: (Link, overlap)}, "notes": [...]}: the measured link (with its measured overlap), then the
    rest: the --link ones, else the --gpu's NVLink, else every preset."""
    chosen, notes = {}, []
    if not keys and gpu is None:
        measured, hidden, note = host_link(on_gpu)
        notes.append(note)
        if measured is not None:
            chosen["measured"] = (measured, hidden)
        keys = list(LINKS)
    if gpu is not None and not keys:
        link = node_link(gpu)
        chosen[gpu] = (Link(link.name, link.bus_gbps, latency_us if latency_us is not None else link.latency_us),
                       overlap)
    for key in keys:
        link = LINKS[key] if key in LINKS else Link("given with --link", float(key), 25.0)
        if latency_us is not None:
            link = Link(link.name, link.bus_gbps, latency_us, link.at_ranks)
        chosen[key] = (link, overlap)
    return {"links": chosen, "notes": notes}


def format_report(r: dict) -> str:
    B, S, T = r["batch"]
    setup, v = r["setup"], r["validation"]
    lines = [f"single-device step: {r['step_ms']:.1f} ms, {r['step_source']}; preset {r['preset']}, B×S×T = "
             f"{B}×{S}×{T} ({r['tgt_tokens_per_device']:,} target tokens per device and micro-batch), "
             f"{r['parameters']:,} parameters = {r['parameters'] * GRAD_BYTES / 1e6:.1f} MB of fp32 gradients"]
    if setup.get("mfu") is not None:
        lines.append(f"{setup['gpu']}: {setup['peak_tflops']:g} TFLOP/s peak {setup['precision']} (datasheet): the step "
                     f"uses {100 * setup['mfu']:.0f}% of it")
    nodes = (f"{setup['nodes']} nodes of {setup['gpus_per_node']}, {setup['network_gbps']:g} GB/s network a node"
             if setup["nodes"] > 1 else f"one node of {setup['gpus_per_node']}")
    lines.append(f"setup: {nodes}; model: straggler × λ = {setup['straggler_scale']:.2f} (fitted on {v['fit']}); "
                 f"held-out error ±{v['held_out_mae']:.1f} points on {v['held_out_rows']} published rows "
                 f"(`scale --validate`)")
    lines += [f"link: {note}" for note in r["link_notes"]]
    lines.append(f"straggler: {r['straggler_source']}")
    lines.append(f"projected data-parallel update ({r['bucket_mb']:g} MB buckets, {r['accum']} micro-batch(es) per "
                 f"device; tokens per device fixed; a projection, not a measurement):")
    for link in r["links"].values():
        lines.append(f"  {link['name']}: {link['bus_gbps']:.3g} GB/s bus bandwidth, {link['latency_us']:.0f} µs a call, "
                     f"{100 * link['overlap']:.0f}% of the all-reduce hidden behind backward (measured or --overlap; the last "
                     f"bucket never)")
        lines.append(f"    {'n':>2} {'straggler':>9} {'all-reduce':>11} {'step':>10} {'efficiency':>10}   "
                     f"{'no overlap':>10}")
        for row in link["rows"]:
            lines.append(f"    {row['devices']:>2} {100 * (row['straggler'] - 1):>+8.1f}% {row['allreduce_ms']:>8.2f} ms "
                         f"{row['step_ms']:>7.1f} ms {100 * row['efficiency']:>9.1f}%   "
                         f"{100 * row['efficiency_no_overlap']:>9.1f}%")
    devices = next(iter(r["paper_runs"].values()))["devices"]
    lines.append(f"the paper's runs on {devices} devices with the paper's update (§5.1: {PAPER_TOKENS_PER_STEP:,} tokens, "
                 f"{PAPER_TOKENS_PER_STEP // devices:,} per device; the step scaled by FLOPs from the one above, so "
                 f"a lower bound; paper: base 12 h, big 3.5 days on 8 P100, §5.2):")
    for name, run_ in r["paper_runs"].items():
        lines.append(f"  {name:4s} {run_['steps']:>7,} steps, {run_['parameters'] / 1e6:.0f}M parameters, "
                     f"{run_['step_1_device_ms']:.1f} ms/step on one device:")
        for key, hours in run_["hours"].items():
            lines.append(f"       {r['links'][key]['name']}: {hours:,.1f} h "
                         f"({100 * run_['efficiency'][key]:.0f}% efficiency)")
    return "\n".join(lines)

