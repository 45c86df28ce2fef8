"""The scaling model checked against a published measurement: NVIDIA's Transformer (§5.2) on 1, 4 and 8 A100s.

NVIDIA DeepLearningExamples, PyTorch/Translation/Transformer, README "Training performance: NVIDIA
DGX A100 (8x A100 40GB)", pytorch-22.06 container, mixed precision, 10,240 tokens per GPU
(`--max-tokens 10240`, no accumulation): 82,059 tokens/s on 1 GPU, 286,081 on 4, 551,599 on 8,
i.e. 87.2% and 84.0% weak-scaling efficiency. The model is Transformer big
(`transformer_wmt_en_de_big_t2t`, shared embeddings, 33,712-token vocabulary: 211M parameters),
data parallel with apex DDP (buckets of 10M fp32 gradients = 40 MB).

Every input of the prediction is published or measured; none is fitted to the result:
  step(1)     the measured 82,059 tokens/s at the target tokens per batch of WMT news lengths
              (newstest2012-2017) batched as fairseq batches them (batch_work.fairseq_batches)
  straggler   those batches' FLOPs distribution (batch_work.batch_work)
  link        the NVLink 3 preset (nccl-tests figure for 8 A100s), 40 MB buckets, fp32 gradients
  overlap     0: NVIDIA did not publish how much of its all-reduce hid behind backward
It needs the newstest files (../shared/data/wmt_newstest); without them it says so.
"""
from __future__ import annotations

from train.experiments import batch_work
from train.experiments.scale import GRAD_BYTES, LINKS, parameter_count, project
from transformer.config import TransformerConfig

A100_TOKENS_PER_S = {1: 82_059, 4: 286_081, 8: 551_599}
A100_TOKENS_PER_GPU = 10_240
A100_BUCKET_MB = 40.0                # apex DistributedDataParallel: message_size = 1e7 fp32 elements
A100_MODEL = TransformerConfig.big().replace(vocab_size=33_712)
SOURCE = ("NVIDIA DeepLearningExamples PyTorch/Translation/Transformer README, DGX A100 (8x A100 40GB), "
          "pytorch-22.06, mixed precision, 10,240 tokens per GPU")


def measured_efficiency(n: int) -> float:
    return A100_TOKENS_PER_S[n] / (n * A100_TOKENS_PER_S[1])


def validate(lengths: tuple | None) -> dict | None:
    """The model's efficiency for 4 and 8 A100s beside the measured one, with every input, from
    batch_work.newstest_lengths(); None without them."""
    if lengths is None:
        return None
    src, tgt = lengths
    batches = batch_work.fairseq_batches(src, tgt, A100_TOKENS_PER_GPU)
    work = batch_work.batch_work(batches, src, tgt, A100_MODEL, pad=8)
    tokens = batch_work.mean_target_tokens(batches, tgt)
    step_s = tokens / A100_TOKENS_PER_S[1]
    grad_bytes = parameter_count(A100_MODEL) * GRAD_BYTES
    rows = {row["devices"]: row for row in project(step_s, grad_bytes, LINKS["nvlink3"], A100_BUCKET_MB,
                                                    work=work, overlap=0.0, devices=[4, 8])}
    return {"source": SOURCE, "step_ms": step_s * 1e3, "target_tokens_per_batch": tokens, "batches": len(batches),
            "parameters": parameter_count(A100_MODEL), "link": LINKS["nvlink3"].name,
            "bucket_mb": A100_BUCKET_MB, "overlap": 0.0,
            "rows": {n: {**rows[n], "measured": measured_efficiency(n)} for n in rows}}


def format_validation(v: dict | None) -> list[str]:
    if v is None:
        return ["validation: needs newstest2012-2017 in ../shared/data/wmt_newstest (the WMT sentence lengths "
                "the A100 check batches); not run"]
    lines = [f"validation against a published run ({v['source']}):",
             f"  inputs: Transformer big, {v['parameters'] / 1e6:.0f}M parameters (fp32 gradients), step(1) "
             f"{v['step_ms']:.1f} ms = {v['target_tokens_per_batch']:,.0f} target tokens per batch (newstest lengths, "
             f"fairseq batching, {v['batches']} batches) / 82,059 tok/s; {v['link']}; {v['bucket_mb']:g} MB buckets; "
             f"overlap {v['overlap']:g} (not published)"]
    for n, row in v["rows"].items():
        lines.append(f"  {n} GPUs: straggler +{100 * (row['straggler'] - 1):.1f}%, all-reduce {row['allreduce_ms']:.1f} "
                     f"ms -> model {100 * row['efficiency']:.1f}% vs measured {100 * row['measured']:.1f}% "
                     f"({100 * (row['efficiency'] - row['measured']):+.1f} points)")
    return lines
