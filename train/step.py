"""One training update, the whole algorithm in one function (§5.3, §5.4).

    stats = train_step(model, batches, optimizer, loss_fn, scaler)

`batches` are the `train.accum` micro-batches of one update (§5.1 token budgets;
accumulating several is how one device reaches the paper's ~25,000 target tokens per
step). Each runs forward and backward with dropout on and the label-smoothed loss;
the gradients add up, weighted so that their sum is the gradient of the mean loss
over every target token of the update. Then one Adam step (§5.3) at the rate of
Eq. (3). Everything else a run does (logging, validation, checkpoints, signals) is
bookkeeping around this, in loop.py.

The gradients meet in one flat array (`optimizer.gather_grads()`): the place where a
data-parallel all-reduce goes, then the loss scaler's unscale and finiteness check,
then clipping, each one kernel on one array.
Shapes: B pairs, S source length, T target length.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from minitensor.optim import clip_grad_norm


@dataclass
class StepStats:
    """What one update did. Sums are device scalars: float() them only when logging (a GPU sync)."""

    loss_sum: object          # Σ over target tokens of the smoothed loss (§5.4)
    nll_sum: object           # Σ over target tokens of −log p(gold): perplexity's numerator
    tgt_tokens: int           # non-pad target tokens
    src_tokens: int           # non-pad source tokens
    padded_tokens: int        # source + target positions including padding (B·S + B·T per batch)
    grad_norm: object | None  # L2 norm before clipping, when asked for or clipping
    finite: bool              # loss and every gradient finite
    stepped: bool             # the optimizer stepped (not: an fp16 overflow skipped it, or non-finite fp32)


def train_step(model, batches, optimizer, loss_fn, scaler=None, clip_norm: float = 0.0,
               measure_grad_norm: bool = False) -> StepStats:
    """Forward and backward over `batches` [(src (B,S), tgt_in (B,T), tgt_out (B,T)), ...], then one update.

    With `scaler` (fp16 mixed precision) the loss is scaled before backward, and an overflow
    skips the update and lowers the scale. Without one, a non-finite loss or gradient also
    skips it, and `stats.finite` is False: the caller decides (the loop stops the run).
    """
    pad_id = model.config.pad_id
    n_target = sum(int((tgt_out != pad_id).sum()) for _, _, tgt_out in batches)
    optimizer.zero_grad()
    loss_sum = nll_sum = 0.0
    src_tokens = padded = 0
    for src, tgt_in, tgt_out in batches:
        out = loss_fn(model(src, tgt_in), tgt_out)                          # (B, T, V) logits -> mean loss
        weighted = out.loss * (out.n_tokens / max(n_target, 1))             # Σ over batches = mean over all tokens
        (weighted if scaler is None else scaler.scale_loss(weighted)).backward()
        loss_sum = loss_sum + out.loss.data * out.n_tokens
        nll_sum = nll_sum + out.nll_sum
        src_tokens += int((src != pad_id).sum())
        padded += src.size + tgt_out.size
    grad = optimizer.gather_grads()                                          # every gradient, one flat array
    finite = scaler.unscale_and_check(grad) if scaler is not None else all_finite(grad, loss_sum)
    if not finite:
        check_ids(model, batches)                                            # a bad token id comes out as NaN on a GPU
    stepped = scaler.update(finite) if scaler is not None else finite       # overflow: skip, lower the scale
    grad_norm = None
    if stepped and (clip_norm > 0 or measure_grad_norm):
        grad_norm = clip_grad_norm(grad, clip_norm if clip_norm > 0 else math.inf)
    if stepped:
        optimizer.step()                                                     # §5.3: Adam at the Eq. (3) rate
    return StepStats(loss_sum, nll_sum, n_target, src_tokens, padded, grad_norm, finite, stepped)


def check_ids(model, batches) -> None:
    """IndexError naming a token id of `batches` outside the model's vocabulary, if there is one.

    On a GPU the embedding and loss kernels turn such an id into NaN instead of reading or
    writing off their tables (kernels/README.md), so it surfaces as a non-finite step; this
    looks at the ids only then (a sync, on a failed step only). CPU kernels raise at once.
    """
    vocab = model.config.vocab_size
    for i, batch in enumerate(batches):
        for name, ids in zip(("source", "target input", "target output"), batch):
            ids = model.backend.to_numpy(ids)
            if ids.size and (ids.min() < 0 or ids.max() >= vocab):
                bad = int(ids.min() if ids.min() < 0 else ids.max())
                raise IndexError(f"batch {i}: {name} token id {bad} is outside the vocabulary [0, {vocab}) "
                                 f"(does the tokenizer match the model?)")


def all_finite(grad, loss) -> bool:
    """True when the loss and every gradient are finite: one reduction and one host read.

    The sum is finite exactly when every element is (inf − inf is nan, which also fails),
    barring an overflow of the sum itself, which is also a reason to stop.
    """
    return bool(np.isfinite(float(loss + grad.sum())))
