"""Solutions to chapter 10's exercises (checked by `check_padding_mask`, `check_shift_right`) and the answer key PREDICT."""
import numpy as np


def padding_mask_fixed(ids: np.ndarray, pad: int) -> np.ndarray:
    """bool (B, 1, 1, S): True at padding *keys*, the same row for every head and every query.

    The suspect version, (B, 1, S, 1), puts the padding flags on the query axis: it blanks the rows of
    padding queries (whose outputs nobody uses) and lets every real query attend to padding keys, so
    appending padding changes real outputs; against cross-attention scores (B, H, T, S) its S query
    flags do not even broadcast when T ≠ S.
    """
    return (ids == pad)[:, None, None, :]


def shift_right(tgt: np.ndarray, bos: int, eos: int, pad: int):
    """Right-padded targets (B, n) -> decoder input BOS y1..yk and labels y1..yk EOS, both (B, n+1) (§3.1)."""
    B, n = tgt.shape
    tgt_in = np.full((B, n + 1), pad, dtype=np.int64)
    tgt_out = np.full((B, n + 1), pad, dtype=np.int64)
    for row in range(B):
        seq = tgt[row][tgt[row] != pad]
        tgt_in[row, 0], tgt_in[row, 1:len(seq) + 1] = bos, seq
        tgt_out[row, :len(seq)], tgt_out[row, len(seq)] = seq, eos
    return tgt_in, tgt_out


PREDICT = """Exercise 1. At the first step the leaky model's decoder sees only BOS: in training, position 0's
label y₁ was also its input at position 1, which it could read through the missing mask, so it never had to
learn to predict y₁ from the source. With the future absent it falls back on whatever fits "BOS alone": a
token that is usually wrong, and every later step copies from a future that was never written; the outputs
match the sources essentially never (greedy exact match ≈ 0)."""
