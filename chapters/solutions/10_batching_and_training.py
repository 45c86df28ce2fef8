"""Solutions to chapter 10's exercises (checked by `check_bucket_batches`, `check_make_model_inputs`)."""
import numpy as np


def bucket_batches(src_len, tgt_len, max_tokens):
    """§5.1: sort by max(src, tgt) length, then close a batch when B·max(S) or B·max(T) would pass the budget."""
    src_len, tgt_len = np.asarray(src_len), np.asarray(tgt_len)
    order = np.lexsort((tgt_len, src_len, np.maximum(src_len, tgt_len)))
    batches, current, max_s, max_t = [], [], 0, 0
    for i in order:
        s, t = max(max_s, src_len[i]), max(max_t, tgt_len[i])
        if current and (len(current) + 1) * max(s, t) > max_tokens:
            batches.append(current)
            current, s, t = [], src_len[i], tgt_len[i]
        current.append(int(i))
        max_s, max_t = s, t
    return batches + ([current] if current else [])


def make_model_inputs(src, tgt, bos, eos, pad):
    """Padded (src + EOS, BOS + tgt, tgt + EOS) arrays (§3.1: the decoder input is offset by one)."""
    def pad_rows(rows):
        out = np.full((len(rows), max(len(r) for r in rows)), pad, dtype=np.int64)
        for i, r in enumerate(rows):
            out[i, :len(r)] = r
        return out
    return (pad_rows([list(s) + [eos] for s in src]), pad_rows([[bos] + list(t) for t in tgt]),
            pad_rows([list(t) + [eos] for t in tgt]))
