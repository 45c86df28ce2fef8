"""Label-smoothed cross-entropy (§5.4): "we employed label smoothing of value ε_ls = 0.1".

Shapes: B batch, T target length, V vocab, N = B·T rows.

Smoothed target q (chosen and tested; the paper does not spell it out): 1 − ε on the
gold token, 0 on padding, ε/(V − 2) on each of the other V − 2 tokens.
Per token: loss = −Σ_j q_j log p_j. The reported loss is the sum over non-pad
tokens divided by their number; the true NLL (−log p_gold, what perplexity
needs) is summed alongside.

`impl = "composed"` (the default) builds q and the sum from Tensor ops, as chapter 09
derives them; `impl = "fused"` runs minitensor's CrossEntropy kernel, which never
builds the (N, V) q (loss, NLL and gradient in one pass over V). Tests compare both.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import minitensor as mt
from minitensor.dtypes import BF16
from minitensor.functions import CrossEntropy, LinearCrossEntropy
from minitensor.functions.composed import smoothed_targets


@dataclass
class LossOutput:
    """loss: scalar Tensor to call backward on; nll_sum: 0-d backend array (read with float() only
    when logging, it syncs the GPU); n_tokens: non-pad target tokens in the batch."""

    loss: mt.Tensor
    nll_sum: object
    n_tokens: int


class LabelSmoothingLoss:
    """§5.4 label smoothing; padding targets (pad_id) contribute nothing."""

    def __init__(self, eps_ls: float, pad_id: int | None, impl: str = "composed"):
        if not 0.0 <= eps_ls < 1.0:
            raise ValueError(f"eps_ls must be in [0, 1), got {eps_ls}")
        if impl not in ("composed", "fused"):
            raise ValueError(f"impl must be 'composed' or 'fused', got {impl!r}")
        self.eps_ls, self.pad_id, self.fused = eps_ls, pad_id, impl == "fused"

    def __call__(self, logits: mt.Tensor, targets) -> LossOutput:
        """logits (B, T, V), targets (B, T) integer -> LossOutput."""
        B, T, V = logits.shape
        targets = targets.data if isinstance(targets, mt.Tensor) else targets
        if tuple(targets.shape) != (B, T):
            raise ValueError(f"targets of shape {tuple(targets.shape)} do not match logits {logits.shape}")
        host = targets if isinstance(targets, np.ndarray) else logits.backend.to_numpy(targets)
        n_tokens = int(host.size if self.pad_id is None else (host != self.pad_id).sum())
        flat = logits.reshape(B * T, V)                                        # (B, T, V) -> (N, V)
        if flat.dtype == np.float16 and logits.device == "cpu":
            flat = flat.astype(np.float32)                                     # the CPU's float16 path computes on a copy
        flat_targets = logits.backend.asarray(host.reshape(-1))               # (N,)
        if self.fused:                                                         # one kernel, no (N, V) q
            # it reads half-precision logits (bf16 bits too) and keeps its sums in float32
            # (kernels/README.md): a mixed step makes no float32 (N, V) copy
            rows, nll = CrossEntropy.apply(flat, targets=flat_targets, smoothing=self.eps_ls,
                                           ignore_index=self.pad_id)           # (N,), (N,)
            nll_sum = nll.sum()
        else:
            flat = flat.astype(np.float32) if flat.dtype == BF16 else flat     # bf16 bits are no numbers to Tensor ops
            log_p = flat.log_softmax(-1)                                       # (N, V) log p_j
            xp = flat.backend.xp
            q = smoothed_targets(xp, flat_targets, V, self.eps_ls, self.pad_id, flat.dtype)   # (N, V)
            rows = -(log_p * q).sum(axis=-1)                                   # §5.4: −Σ_j q_j log p_j, (N,)
            gold = log_p.data[xp.arange(B * T), flat_targets]                  # log p_gold, no gradient needed
            nll_sum = -(gold if self.pad_id is None else gold * (flat_targets != self.pad_id)).sum()
        return self._mean(rows, nll_sum, n_tokens)

    def of_projection(self, hidden: mt.Tensor, embedding: mt.Tensor, targets) -> LossOutput:
        """The loss of the logits hidden Eᵀ (§3.4), never made: hidden (N, D), E (V, D), targets (N,).

        impl "fused" only: LinearCrossEntropy projects and scores a block of rows at a time.
        """
        if not self.fused:
            raise ValueError("of_projection runs the fused kernels: build the loss with impl='fused'")
        targets = targets.data if isinstance(targets, mt.Tensor) else targets
        host = targets if isinstance(targets, np.ndarray) else hidden.backend.to_numpy(targets)
        n_tokens = int(host.size if self.pad_id is None else (host != self.pad_id).sum())
        rows, nll = LinearCrossEntropy.apply(hidden, embedding, targets=hidden.backend.asarray(host),
                                             smoothing=self.eps_ls, ignore_index=self.pad_id)   # (N,), (N,)
        return self._mean(rows, nll.sum(), n_tokens)

    @staticmethod
    def _mean(rows: mt.Tensor, nll_sum, n_tokens: int) -> LossOutput:
        loss = rows.sum() * (1.0 / max(n_tokens, 1))                           # §5.4: mean over non-pad tokens
        return LossOutput(loss=loss, nll_sum=nll_sum, n_tokens=n_tokens)


def closed_form_smoothed_loss(logits: np.ndarray, targets: np.ndarray, eps_ls: float, pad_id: int):
    """NumPy twin in float64 via the closed form, no q matrix: (mean smoothed loss, nll sum, n_tokens).

    With lse = log Σ_j exp z_j and Σ_j q_j = 1:
        −Σ_j q_j log p_j = lse − (1 − ε) z_gold − ε/(V − 2) (Σ_j z_j − z_gold − z_pad)
    """
    z = np.asarray(logits, dtype=np.float64).reshape(-1, logits.shape[-1])    # (N, V)
    t = np.asarray(targets).reshape(-1)                                        # (N,)
    V, rows = z.shape[1], np.arange(z.shape[0])
    m = z.max(axis=1)
    lse = m + np.log(np.exp(z - m[:, None]).sum(axis=1))                       # (N,)
    gold, pad = z[rows, t], z[:, pad_id]
    smoothed = lse - (1 - eps_ls) * gold - eps_ls / (V - 2) * (z.sum(axis=1) - gold - pad)   # §5.4
    keep = t != pad_id
    n_tokens = int(keep.sum())
    return float(smoothed[keep].sum() / max(n_tokens, 1)), float((lse - gold)[keep].sum()), n_tokens
