"""Embeddings and the pre-softmax linear transformation (§3.4).

Shapes: B batch, S source length, T target length, D = d_model, V vocab.

"We use learned embeddings to convert the input tokens and output tokens to
vectors of dimension d_model ... we share the same weight matrix between the
two embedding layers and the pre-softmax linear transformation ... In the
embedding layers, we multiply those weights by √d_model." (§3.4)

With tie_embeddings the one (V, D) matrix E serves as the source embedding,
the target embedding, and (transposed) the output projection: logits = x Eᵀ.
Untied, there are two tables and a separate (D, V) output Linear.
"""
from __future__ import annotations

import math

import numpy as np

import minitensor as mt
from minitensor import functions as F
from minitensor import nn


class Embeddings(nn.Module):
    """Token embeddings ×√d_model and the output projection, tied or not (§3.4).

    REPRODUCTION note on init (paper silent): E ~ N(0, d_model^-0.5), as in
    tensor2tensor. Times √d_model (§3.4) the embedded inputs have unit variance,
    the same scale as the sinusoids they are added to (§3.5), and the tied output
    logits x Eᵀ of a unit-variance x also have variance ≈ 1 at the start.
    """

    def __init__(self, vocab_size: int, d_model: int, tie: bool, rng: np.random.Generator):
        super().__init__()
        self.tie, self.scale = tie, math.sqrt(d_model)
        std = d_model ** -0.5
        if tie:
            self.shared = nn.Embedding(vocab_size, d_model, rng=rng, std=std)
        else:
            self.src = nn.Embedding(vocab_size, d_model, rng=rng, std=std)
            self.tgt = nn.Embedding(vocab_size, d_model, rng=rng, std=std)
            self.generator = nn.Linear(d_model, vocab_size, bias=False, rng=rng)   # Xavier, (D, V)

    def table(self, side: str) -> nn.Embedding:
        """The embedding table of side "src" or "tgt": the one shared E when tied (§3.4)."""
        return self.shared if self.tie else getattr(self, side)

    def output_weight(self) -> mt.Tensor:
        """The (D, V) weight of the pre-softmax linear transformation: Eᵀ when tied (§3.4), else the generator's."""
        return self.shared.weight.T if self.tie else self.generator.weight

    def source(self, ids) -> mt.Tensor:
        return self.table("src")(ids) * self.scale                     # §3.4: ×√d_model, (B, S) -> (B, S, D)

    def target(self, ids) -> mt.Tensor:
        return self.table("tgt")(ids) * self.scale                     # §3.4: ×√d_model, (B, T) -> (B, T, D)

    def logits(self, x: mt.Tensor) -> mt.Tensor:
        """The pre-softmax linear transformation (§3.4): (B, T, D) -> (B, T, V)."""
        if not self.tie:
            return self.generator(x)
        return F.Linear.apply(x, self.shared.weight.T)                # §3.4: x Eᵀ, (B, T, D) @ (D, V) -> (B, T, V)
