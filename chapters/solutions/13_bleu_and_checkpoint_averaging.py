"""Solutions to chapter 13's exercises (checked by `check_bleu_stats`, `check_average`)."""
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


def average_state_dicts(states):
    """§6.1 checkpoint averaging: element-wise mean per name, summed in float64, cast back to each dtype."""
    return {name: (sum(s[name].astype(np.float64) for s in states) / len(states)).astype(states[0][name].dtype)
            for name in states[0]}


PREDICT = """Exercise 1. Hypothesis = the first 9 words of the 10-word reference. Every n-gram of the hypothesis
occurs in the reference, so p_1 = p_2 = p_3 = p_4 = 1; only the brevity penalty bites: BP = exp(1 − r/c) =
exp(1 − 10/9) = exp(−1/9) ≈ 0.895, so BLEU ≈ 89.5. (Dropping a word in the middle would instead break n-grams
and lower p_2..p_4 too.)"""
