"""Solutions to chapter 12's exercises (checked by `check_beam_trap`, `check_rerank`) and the answer key PREDICT."""
import numpy as np

PAD, UNK, BOS, EOS = 0, 1, 2, 3


def _lp(length, alpha):
    return ((5.0 + length) / 6.0) ** alpha                      # §6.1 (GNMT) length penalty


def beam_trap(k: int) -> np.ndarray:
    """k + 1 first tokens after BOS. The first k ("decoys", 4..k+3) are each a bit more probable than the last
    one (the "key"), but every decoy leads to a uniform spread over many continuations, while the key leads to
    EOS with certainty. Beam k keeps only the decoys, whose best completion is poor; beam k + 1 also keeps the
    key, and BOS key EOS is the optimum.
    """
    V = 12
    p = np.full((V, V), 1e-12)
    decoys, key = list(range(4, 4 + k)), 4 + k
    share = 0.9 / (k + 0.9)                                      # each decoy; the key gets 0.9·share (less)
    p[BOS, decoys], p[BOS, key] = share, 0.9 * share
    continuations = [t for t in range(4, V) if t != key]
    for d in decoys:                                             # after a decoy: uniform, nothing good
        p[d, continuations] = 1.0
    p[key, EOS] = 1.0                                            # after the key: done, probability ~1
    for t in range(4, V):
        if t not in decoys and t != key:
            p[t, EOS] = 1.0
    p[EOS, EOS] = 1.0
    p[[PAD, UNK], EOS] = 1.0
    return np.log(p / p.sum(axis=1, keepdims=True))


def rerank(hypotheses, alpha):
    """The tokens of the (tokens, log_p) pair with the best log_p / lp(len(tokens) + 1) (+1 for EOS)."""
    return max(hypotheses, key=lambda h: h[1] / _lp(len(h[0]) + 1, alpha))[0]


PREDICT = """Exercise 1. Counting EOS in the 10 and 2 tokens: lp(10) = (15/6)^0.6 ≈ 1.733, so −3.0 scores
−3.0/1.733 ≈ −1.73; lp(2) = (7/6)^0.6 ≈ 1.097, so −1.5 scores ≈ −1.37. The 2-token output still wins at
α = 0.6, by less than without the penalty (−1.5 against −3.0); from α = ln 2 / ln(15/7) ≈ 0.91 on, the long one wins."""
