"""Solutions to chapter 11's exercises (checked by `check_brute_force`, `check_rerank`)."""
import itertools

import numpy as np

PAD, UNK, BOS, EOS = 0, 1, 2, 3


def _lp(length, alpha):
    return ((5.0 + length) / 6.0) ** alpha                      # §6.1 (GNMT) length penalty


def brute_force_decode(table, max_len, alpha):
    """Score every output of ≤ max_len tokens (EOS counted; cut at max_len without EOS) and keep the best."""
    words = [t for t in range(table.shape[0]) if t not in (PAD, UNK, BOS, EOS)]
    best, best_score = [], -np.inf
    for n in range(max_len + 1):
        for seq in itertools.product(words, repeat=n):
            tokens = list(seq) + ([EOS] if n < max_len else [])
            prev, log_p = BOS, 0.0
            for tok in tokens:
                log_p, prev = log_p + table[prev, tok], tok
            score = log_p / _lp(len(tokens), alpha)
            if score > best_score:
                best, best_score = list(seq), score
    return best


def rerank(hypotheses, alpha):
    """The tokens of the (tokens, log_p) pair with the best log_p / lp(len(tokens) + 1) (+1 for EOS)."""
    return max(hypotheses, key=lambda h: h[1] / _lp(len(h[0]) + 1, alpha))[0]
