"""Position-wise feed-forward network (§3.3, Eq. (2)).

Shapes: B batch, T positions, D = d_model, F = d_ff.

    FFN(x) = max(0, x W₁ + b₁) W₂ + b₂

"applied to each position separately and identically": a (B, T, D) input is one
batch of B·T rows for the two matmuls. The paper puts no dropout inside the FFN
(§5.4 lists only residual and embedding dropout), so there is none here.
"""
from __future__ import annotations

import numpy as np

import minitensor as mt
from minitensor import nn


class PositionwiseFeedForward(nn.Module):
    """w_1: (D, F), w_2: (F, D), Xavier-uniform weights and zero biases.

    fused (config.impl = "fused"): max(0, xW₁ + b₁) runs as one Function (LinearReLU: the product,
    then the bias and the ReLU in one pass over its output); the same math.
    output_bias False: W₂ leaves b₂ out, for the sub-layer connection to add (layers.py).
    """

    def __init__(self, d_model: int, d_ff: int, rng: np.random.Generator, fused: bool = False,
                 output_bias: bool = True):
        super().__init__()
        self.fused = fused
        self.w_1 = nn.Linear(d_model, d_ff, rng=rng)
        self.w_2 = nn.Linear(d_ff, d_model, rng=rng)
        self.w_2.add_bias = output_bias

    def forward(self, x: mt.Tensor) -> mt.Tensor:
        if self.fused:
            hidden = self.w_1(x, relu=True)         # §3.3, Eq. (2): max(0, xW₁ + b₁) as one op
        else:
            hidden = self.w_1(x).relu()             # §3.3, Eq. (2): max(0, xW₁ + b₁), (B, T, D) -> (B, T, F)
        return self.w_2(hidden)                     # §3.3, Eq. (2): (·)W₂ + b₂, (B, T, F) -> (B, T, D)
