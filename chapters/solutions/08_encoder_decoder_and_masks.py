"""Solutions to chapter 08's exercises (checked by `check_causal_mask`, `check_shift_right`)."""
import numpy as np


def causal_mask(T: int) -> np.ndarray:
    """bool (T, T): True where key j lies after query i (§3.2.3), i.e. the strict upper triangle."""
    return np.triu(np.ones((T, T), dtype=bool), k=1)


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
