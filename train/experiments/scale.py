"""How fast data-parallel training runs on n devices: a model from measured and published parts, validated on
published runs it was not fitted on (scale_validation.py).

Data parallelism (§5.2: 8 GPUs; train/distributed/) adds to the one-device update of `accum`
micro-batches two costs, and this model has both, every input measured or published but λ:

    compute(n)   = step(1) · (1 + λ · (straggler(n) − 1))      the update waits for its slowest rank
    t_ar(n)      = buckets · α(n) + 2(n−1)/n · bytes / busbw          ring all-reduce, fp32 gradients
    exposed(n)   = max(t_ar(n) · (1 − overlap), t_ar(n) of the last bucket)
    step(n)      = compute(n) + exposed(n);   efficiency(n) = step(1) / step(n)   (weak scaling)

  straggler(n)  E[max over the n ranks of a rank's work] / E[a rank's work], a rank's work being
                the sum of `accum` batches drawn from a measured distribution of per-batch work
                (train/experiments/batch_work.py: FLOPs of real-length batches). 1 without one.
  λ             how much more a batch's time varies than its FLOPs (softmax and layer norm are
                memory-bound and grow with the longest sentence; WMT's training sentences are not
                newstest's): the one constant fitted, on one named row of the published table
                (scale_validation.STRAGGLER_SCALE). 1 reads the FLOPs as the time.
  α(n)          the latency of one all-reduce call: a ring of n ranks has 2(n−1) hops, so α
                measured (or preset) at m ranks is scaled by (n−1)/(m−1). Paid per bucket.
  overlap       the fraction of the all-reduce that ran hidden behind compute, as measured on
                the link (scale_report.measure_allreduce); 0 where it was not measured; 1 for a
                trainer that all-reduces buckets during backward on a GPU (apex DDP, our
                grad_sync on NCCL). On CPU ranks MPICH makes no progress in the background: ~0.
                The last bucket starts when backward ends: it never hides. With tied embeddings
                (§3.4) it holds at least the embedding, whose gradient is complete only then.

Links: a node's GPUs talk over NVLink, nccl-tests' ring bus bandwidth being NVLink's line rate less
NCCL's protocol overhead (NCCL_OF_NVLINK); across nodes a ring crosses the network once per
channel, so its bus bandwidth is at most what a node's adapters send, less theirs (NCCL_OF_NETWORK).

Bus bandwidth follows nccl-tests (busbw = algbw · 2(n−1)/n), so one number describes a link for
every n. `python -m train scale --validate` sets the model beside NVIDIA's published Transformer
runs on 4-16 V100s and A100s; every projection prints the held-out error.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from transformer.config import TransformerConfig

GRAD_BYTES = 4                       # the all-reduced gradient is fp32 (Adam's flat gradient), also in mixed precision
PAPER_RUNS = {"base": (TransformerConfig.base(), 100_000), "big": (TransformerConfig.big(), 300_000)}   # §5.2
PAPER_TOKENS_PER_STEP = 25_000       # §5.1: ~25,000 target tokens per training batch
STRAGGLER_DRAWS = 20_000             # updates sampled for E[max]: the estimate is good to ~0.1%


@dataclass(frozen=True)
class Link:
    name: str
    bus_gbps: float                  # GB/s, nccl-tests' bus bandwidth
    latency_us: float                # one all-reduce call at `at_ranks` ranks
    at_ranks: int = 8


LINKS = {  # presets: published nccl-tests all_reduce_perf figures for 8 GPUs of one node (large messages)
    "nvlink3": Link("NVLink 3 (A100 SXM, NVSwitch), preset", 230.0, 25.0),
    "nvlink4": Link("NVLink 4 (H100 SXM, NVSwitch), preset", 450.0, 25.0),
    "pcie5": Link("PCIe 5 x16, preset", 64.0, 40.0),
}


# GB/s per GPU and direction, datasheets: V100 SXM2 6 NVLink 2 links, A100 SXM4 12 NVLink 3, H100/H200 SXM5 18 NVLink 4,
# 25 GB/s each. DGX-2's V100s reach its NVSwitches over the same 6 links. DGX-1's hybrid cube-mesh (no switch) wires
# them as three "interwoven rings of single NVLink connections" over its 8 V100s (NVIDIA's DGX-1 V100 white paper,
# §3.1), so a ring over all 8 sees the same 150 GB/s: nccl-tests measures 129 GB/s ring bus bandwidth on such a
# mesh (all_gather, 4 GB, 8 V100-SXM2, NVIDIA/nccl-tests issue 37).
NVLINK_GBPS = {"V100": 150.0, "A100": 300.0, "H100": 450.0, "H200": 450.0}
# nccl-tests ring bus bandwidth over line rate. NVLink: 370 of H100's 450 GB/s ("~20% protocol overhead", NCCL's
# maintainer in NVIDIA/nccl-tests issue 212; NVLink SHARP reaches 480, not counted). Network: 46-48 GB/s per
# NDR 400 Gb/s adapter (NVIDIA/nccl-tests issue 290), 192 GB/s ring bus bandwidth on 2 DGX A100s' 8 × 200 Gb/s
# (NVIDIA/nccl issue 1576).
NCCL_OF_NVLINK = 370.0 / 450.0
NCCL_OF_NETWORK = 47.0 / 50.0
NETWORKS = {  # GB/s a node sends: DGX A100 8 × ConnectX-6 HDR 200 Gb/s, DGX H100 8 × ConnectX-7 NDR 400 Gb/s (datasheets)
    "ib-hdr": 200.0,
    "ib-ndr": 400.0,
}


def node_link(gpu: str, latency_us: float = 25.0) -> Link:
    """The link a ring all-reduce sees between the GPUs of one node: their NVLink at nccl's ring fraction."""
    return Link(f"{gpu} NVLink ({NVLINK_GBPS[gpu]:g} GB/s a GPU) x {NCCL_OF_NVLINK:.2f} nccl ring",
                NVLINK_GBPS[gpu] * NCCL_OF_NVLINK, latency_us)


def across_nodes(link: Link, network_gbps: float) -> Link:
    """`link` once the ring leaves the node: capped by what a node's adapters send, at nccl's ring fraction."""
    return Link(f"{link.name}, across nodes ({network_gbps:g} GB/s a node)",
                min(link.bus_gbps, network_gbps * NCCL_OF_NETWORK), link.latency_us, link.at_ranks)


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


def call_latency(n: int, link: Link) -> float:
    """Seconds of one all-reduce call's latency on n ranks: 2(n−1) ring hops, scaled from the link's measurement."""
    if n == 1:
        return 0.0
    return link.latency_us * 1e-6 * (n - 1) / max(link.at_ranks - 1, 1)


def allreduce_time(n: int, nbytes: float, link: Link, buckets: int) -> float:
    """Seconds of a ring all-reduce of `nbytes` in `buckets` calls over n devices (0 for one device)."""
    if n == 1:
        return 0.0
    return buckets * call_latency(n, link) + 2 * (n - 1) / n * nbytes / (link.bus_gbps * 1e9)


def straggler(work: np.ndarray | None, n: int, accum: int = 1, seed: int = 0) -> float:
    """E[max over n ranks of a rank's work] / E[a rank's work]; a rank sums `accum` batches drawn from `work`."""
    if work is None or n == 1:
        return 1.0
    draws = np.random.default_rng(seed).choice(work, size=(STRAGGLER_DRAWS, n, accum)).sum(axis=2)
    return float(draws.max(axis=1).mean() / draws.mean())


def bucket_sizes(grad_bytes: float, bucket_mb: float, last_at_least: float = 0.0) -> tuple[int, float]:
    """(number of buckets, bytes of the last one) when the gradient is cut into `bucket_mb` MB buckets (0: one);
    the last holds at least `last_at_least` bytes (the tied embedding's gradient, complete only when backward ends)."""
    if bucket_mb <= 0:
        return 1, grad_bytes
    buckets = max(1, int(np.ceil(grad_bytes / (bucket_mb * 1e6))))
    return buckets, min(grad_bytes, max(grad_bytes - (buckets - 1) * bucket_mb * 1e6, last_at_least))


def embedding_bytes(c: TransformerConfig, grad_bytes_per_weight: int = GRAD_BYTES) -> float:
    """Gradient bytes of the shared embedding (§3.4): the last bucket's floor; 0 when the embeddings are untied."""
    return c.vocab_size * c.d_model * grad_bytes_per_weight if c.tie_embeddings else 0.0


def project(step_s: float, grad_bytes: float, link: Link, bucket_mb: float = 25.0, accum: int = 1,
            work: np.ndarray | None = None, overlap: float = 0.0, devices=range(1, 9),
            straggler_scale: float = 1.0, last_bucket_at_least: float = 0.0, gpus_per_node: int = 8,
            network_gbps: float | None = None) -> list[dict]:
    """One row per device count: straggler, all-reduce, exposed time, step with and without overlap, efficiency.

    `step_s`: one device's update of `accum` micro-batches; `work`: per-batch work (mean 1) or None;
    `straggler_scale`: λ, a batch's time spread over its FLOPs spread; beyond `gpus_per_node` devices
    the ring crosses a network of `network_gbps` GB/s a node.
    """
    buckets, last_bucket = bucket_sizes(grad_bytes, bucket_mb, last_bucket_at_least)
    remote = across_nodes(link, network_gbps) if network_gbps else link
    rows = []
    for n in devices:
        ring = remote if n > gpus_per_node else link
        slowest = 1.0 + straggler_scale * (straggler(work, n, accum) - 1.0)
        t_ar = allreduce_time(n, grad_bytes, ring, buckets)
        exposed = 0.0 if n == 1 else max(t_ar * (1.0 - overlap), allreduce_time(n, last_bucket, ring, 1))
        compute = step_s * slowest
        rows.append({"devices": n, "straggler": slowest, "allreduce_ms": t_ar * 1e3, "exposed_ms": exposed * 1e3,
                     "step_ms": (compute + exposed) * 1e3, "step_no_overlap_ms": (compute + t_ar) * 1e3,
                     "efficiency": step_s / (compute + exposed), "efficiency_no_overlap": step_s / (compute + t_ar)})
    return rows
