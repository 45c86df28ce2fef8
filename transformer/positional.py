"""Positional encodings (§3.5), added to the embeddings at the bottom of both stacks.

Shapes: B batch, T sequence length, D = d_model, L = max_len (rows of the table).

    PE(pos, 2i)   = sin(pos / 10000^(2i/d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))

"learned" swaps the table for a trained (L, D) embedding: Table 3 row (E)
reports nearly identical results; the paper keeps sinusoids because they may
extrapolate to longer sequences.
"""
from __future__ import annotations

import numpy as np

import minitensor as mt
from minitensor import nn


def sinusoid_table(max_len: int, d_model: int) -> np.ndarray:
    """float32 (L, D): §3.5, sin on even dimensions, cos on odd ones; computed in float64."""
    pos = np.arange(max_len, dtype=np.float64)[:, None]                    # (L, 1)
    two_i = np.arange(0, d_model, 2, dtype=np.float64)[None, :]            # (1, D/2)
    angle = pos / 10000.0 ** (two_i / d_model)                             # §3.5: pos / 10000^(2i/d_model), (L, D/2)
    table = np.empty((max_len, d_model), dtype=np.float64)
    table[:, 0::2] = np.sin(angle)                                         # §3.5: PE(pos, 2i)
    table[:, 1::2] = np.cos(angle)                                         # §3.5: PE(pos, 2i+1)
    return table.astype(np.float32)


class PositionalEncoding(nn.Module):
    """x + PE[offset : offset + T], for x (B, T, D). The table is a buffer (sinusoidal) or a Parameter (learned)."""

    def __init__(self, d_model: int, max_len: int, kind: str, rng: np.random.Generator):
        super().__init__()
        self.max_len, self.kind = max_len, kind
        if kind == "sinusoidal":
            self.register_buffer("table", mt.tensor(sinusoid_table(max_len, d_model)))
        elif kind == "learned":
            # paper silent on the init; same scale as the token embedding (see embedding.py)
            self.table = nn.Parameter(nn.init.normal((max_len, d_model), rng, d_model ** -0.5))
        else:
            raise ValueError(f"unknown positional encoding {kind!r}; use 'sinusoidal' or 'learned'")

    def forward(self, x: mt.Tensor, offset: int = 0, time_axis: int = 1) -> mt.Tensor:
        """x (B, T, D) + PE of positions offset.. offset+T-1; time_axis 0: x is (T, B, D)."""
        T = x.shape[time_axis]
        if offset + T > self.max_len:
            raise ValueError(f"positions {offset}..{offset + T - 1} exceed the table of max_len={self.max_len} "
                             f"(raise config.max_len)")
        pe = self.table[offset:offset + T]                                     # (T, D)
        if time_axis == 0:
            pe = pe.reshape(T, 1, pe.shape[-1])                                # (T, 1, D): every sentence
        return x + pe.astype(x.dtype)                                          # (B, T, D) + (T, D)
