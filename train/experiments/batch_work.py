"""How unequal the batches are: the work of each token-budget batch (§5.1), from real sentence lengths.

Data parallelism waits for its slowest rank: every update ends with an all-reduce that no rank
can leave before the last one joins, so an update takes the longest of the ranks' shares. Batches
of one token budget still differ in work (padding, the two sides' lengths, attention's L² term),
and the larger the share of a rank, the less its sum varies. train/experiments/scale.py turns a
distribution of per-batch work into that straggler cost.

    src, tgt = newstest_lengths()                       # WMT news text: newstest2012-2017 En-De, 18k pairs
    work = batch_work(our_batches(src, tgt, 3125), src, tgt, config)        # relative work, mean 1

Lengths are Moses-like tokens (words and punctuation marks, + 1 for EOS) of the raw text, the
tokenization that subword models are learnt on; the sets are in ../shared/data/wmt_newstest.
Two batchers: ours (train/data/batching.py: sorted by the longer side, both sides within the
budget) and fairseq's as NVIDIA's Transformer recipe runs it (sorted by source length, then
target; B × the longer side, rounded up to a multiple of 8, within the budget), the batching of
the published 8-GPU measurement scale.py is validated against.
Work is train_flops (train/run/metrics.py) of the padded batch: what the GPU computes.
"""
from __future__ import annotations

import re

import numpy as np

from train.data.batching import make_batches
from train.data.files import NEWSTEST_YEARS, newstest_paths
from train.errors import InputError
from train.run.metrics import train_flops

MOSES_LIKE = re.compile(r"\w+|[^\w\s]")


def newstest_lengths() -> tuple[np.ndarray, np.ndarray] | None:
    """(source, target) lengths in tokens + EOS of newstest2012-2017 En-De, or None without ../shared/data."""
    try:
        paths = [newstest_paths(year) for year in NEWSTEST_YEARS]
    except InputError:
        return None
    src, tgt = [], []
    for en, de in paths:
        src += [len(MOSES_LIKE.findall(line)) + 1 for line in en.read_text(encoding="utf-8").splitlines()]
        tgt += [len(MOSES_LIKE.findall(line)) + 1 for line in de.read_text(encoding="utf-8").splitlines()]
    return np.array(src), np.array(tgt)


def our_batches(src: np.ndarray, tgt: np.ndarray, budget: int) -> list[np.ndarray]:
    """train/data/batching.py's batches (what `fit` trains on), less the partial one an epoch's sorted order ends with.
    A pair longer than the budget on its own is left out, as `task.max_len` leaves it out of a run's data."""
    kept = np.flatnonzero(np.maximum(src, tgt) <= budget)
    return [kept[batch] for batch in make_batches(src[kept], tgt[kept], budget, seed=0)[:-1]]


def fairseq_batches(src: np.ndarray, tgt: np.ndarray, budget: int, pad: int = 8) -> list[np.ndarray]:
    """NVIDIA's fairseq batches: sorted by source then target length, B × the longer side (a multiple of `pad`) <= budget."""
    order = np.random.RandomState(1).permutation(len(src))
    order = order[np.argsort(tgt[order], kind="mergesort")]
    order = order[np.argsort(src[order], kind="mergesort")]                     # source length is the primary key
    size = -(-np.maximum(src, tgt) // pad) * pad
    batches, current, longest = [], [], 0
    for i in order:
        grown = max(longest, size[i])
        if current and grown * (len(current) + 1) > budget:
            batches.append(np.array(current))
            current, grown = [], size[i]
        current.append(i)
        longest = grown
    batches.append(np.array(current))
    return batches[:-1]                                                          # the partial last one


def batch_work(batches: list[np.ndarray], src: np.ndarray, tgt: np.ndarray, config, pad: int = 1) -> np.ndarray:
    """Each batch's training FLOPs on its padded (B, S) and (B, T) tensors, divided by their mean."""
    def padded(length: int) -> int:
        return -(-int(length) // pad) * pad

    flops = np.array([train_flops(config, len(b) * padded(src[b].max()), len(b) * padded(tgt[b].max()),
                                  padded(src[b].max()), padded(tgt[b].max())) for b in batches])
    return flops / flops.mean()


def mean_target_tokens(batches: list[np.ndarray], tgt: np.ndarray) -> float:
    """Real (unpadded) target tokens per batch: what a tokens/s figure counts."""
    return float(np.mean([tgt[b].sum() for b in batches]))
