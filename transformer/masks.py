"""Attention masks (§3.2.3): True = blocked, shaped to broadcast against scores (B, H, Tq, Tk).

Shapes: B batch, S source length, T target length (queries), P cached (past) positions.

- padding_mask: keys that are padding get no attention (encoder self-attention and
  encoder-decoder attention).
- subsequent_mask: "prevent leftward information flow in the decoder to preserve the
  auto-regressive property ... masking out (setting to −∞) all values in the input of
  the softmax which correspond to illegal connections" (§3.2.3).

Both work on NumPy and CuPy arrays alike (pass `xp=cupy` to build on the GPU).
"""
from __future__ import annotations

import numpy as np


def padding_mask(ids, pad_id: int):
    """bool (B, 1, 1, S): True where ids[b, s] == pad_id (a key nobody may attend to)."""
    if ids.ndim != 2:
        raise ValueError(f"padding_mask: ids must be (B, S), got shape {ids.shape}")
    return (ids == pad_id)[:, None, None, :]  # (B, S) -> (B, 1, 1, S)


def subsequent_mask(T: int, past: int = 0, xp=np):
    """bool (1, 1, T, P+T): True where key j lies after query i (§3.2.3).

    With `past` = P positions already decoded (incremental decoding), query i is
    position P+i and may see keys 0..P+i.
    """
    query = xp.arange(T)[:, None] + past   # (T, 1) absolute query positions
    key = xp.arange(past + T)[None, :]     # (1, P+T)
    return (key > query)[None, None]        # (T, P+T) -> (1, 1, T, P+T)
