"""Solutions to chapter 13's exercises (checked by `check_bleu_stats`, `check_running_average`)."""
from collections import Counter

import numpy as np


def bleu_stats(hyp_tokens, ref_tokens, max_n=4):
    """Clipped n-gram matches and hypothesis n-gram counts for n = 1..max_n (BLEU's sufficient statistics)."""
    matches, totals = [], []
    for n in range(1, max_n + 1):
        hyp = Counter(tuple(hyp_tokens[i:i + n]) for i in range(len(hyp_tokens) - n + 1))
        ref = Counter(tuple(ref_tokens[i:i + n]) for i in range(len(ref_tokens) - n + 1))
        matches.append(sum(min(count, ref[gram]) for gram, count in hyp.items()))
        totals.append(max(len(hyp_tokens) - n + 1, 0))
    return matches, totals


def running_average(checkpoints):
    """§6.1 checkpoint averaging one checkpoint at a time: mean_k = mean_{k-1} + (x_k − mean_{k-1}) / k in float64,
    so memory holds the running mean and the checkpoint being read, whatever the number averaged."""
    mean, dtypes, k = {}, {}, 0
    for state in checkpoints:
        k += 1
        for name, array in state.items():
            if name not in mean:
                mean[name], dtypes[name] = np.zeros(array.shape), array.dtype
            mean[name] += (array.astype(np.float64) - mean[name]) / k
    return {name: value.astype(dtypes[name]) for name, value in mean.items()}


PREDICT = """Exercise 1. Hypothesis = the first 9 words of the 10-word reference. Every n-gram of the hypothesis
occurs in the reference, so p_1 = p_2 = p_3 = p_4 = 1; only the brevity penalty bites: BP = exp(1 − r/c) =
exp(1 − 10/9) = exp(−1/9) ≈ 0.895, so BLEU ≈ 89.5. (Dropping a word in the middle would instead break n-grams
and lower p_2..p_4 too.)"""
