"""The training step the benchmarks time: a model, Adam, the loss and one batch, as `fit` builds them.

One step = forward, label-smoothed loss (§5.4), backward, Adam (§5.3) with the Noam rate
(§5.3, Eq. (3)); fp16 mixed precision adds the loss scaler (train/run/loss_scaler.py).
Shared by bench.py (real backends, and the counting backend's launch model) and host_time.py
(the host-only backend). Shapes: B sentences, S source length, T target length.
"""
from __future__ import annotations

import numpy as np

from minitensor import optim
from transformer.config import TransformerConfig
from transformer.loss import LabelSmoothingLoss
from transformer.model import Transformer

from train.run.loss_scaler import DynamicLossScaler


def setup(cfg: TransformerConfig, backend, precision: str, B: int, S: int, T: int):
    """(model, Adam (writing the half copies in mixed precision), loss, scaler (fp16 only), [one batch])."""
    model = Transformer(cfg, np.random.default_rng(0), backend=backend, precision=precision)
    opt = optim.Adam(model.named_parameters(), lr=optim.NoamSchedule(cfg.d_model, 4000),
                     betas=(0.9, 0.98), eps=1e-9, half_dtype=model.compute_dtype)
    loss_fn = LabelSmoothingLoss(cfg.eps_ls, cfg.pad_id, cfg.impl)
    scaler = DynamicLossScaler() if precision == "fp16" else None
    data = np.random.default_rng(1)
    src = data.integers(4, cfg.vocab_size, (B, S))
    tgt = data.integers(4, cfg.vocab_size, (B, T + 1))
    return model, opt, loss_fn, scaler, [(src, tgt[:, :-1], tgt[:, 1:])]   # the one batch of every step
