"""One training update, the whole algorithm in one function (§5.3, §5.4).

    stats = train_step(model, batches, optimizer, loss_fn, scaler)

`batches` are this rank's micro-batches of one update (§5.1 token budgets; accumulating
several is how one device reaches the paper's ~25,000 target tokens per step:
train/distributed/global_batch.py). Each runs forward and backward with dropout on and the label-smoothed loss;
the gradients add up, weighted so that their sum is the gradient of the mean loss
over every target token of the update. Then one Adam step (§5.3) at the rate of
Eq. (3). Everything else a run does (logging, validation, checkpoints, signals) is
bookkeeping around this, in loop.py.

The gradients meet in one flat array (`optimizer.gather_grads()`): the place where the
data-parallel all-reduce goes (`sync`, train/distributed/grad_sync.py), then the loss scaler's
unscale and finiteness check, then clipping, each one kernel on one array.

Data parallelism (§5.2): with `sync` over k ranks, each rank passes its own share of the
update and the update is the one a single process would make on all k shares
(train/distributed/global_batch.py, count_update). Shapes: B pairs, S source length, T target length.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from minitensor.autograd import backward
from minitensor.backends.denormals import flush_denormals
from minitensor.backends.cuda_graph import refuse_in_capture
from minitensor.optim import clip_grad_norm
from train.distributed.global_batch import count_update
from train.distributed.grad_sync import GradSync


@dataclass
class StepStats:
    """What one update did, over every rank. Sums are device scalars: float() them only when logging (a GPU sync)."""

    loss_sum: object          # Σ over target tokens of the smoothed loss (§5.4)
    nll_sum: object           # Σ over target tokens of −log p(gold): perplexity's numerator
    tgt_tokens: int           # non-pad target tokens
    src_tokens: int           # non-pad source tokens
    padded_tokens: int        # source + target positions including padding (B·S + B·T per batch)
    grad_norm: object | None  # L2 norm before clipping, when asked for or clipping
    finite: bool              # loss and every gradient finite
    stepped: bool             # the optimizer stepped (not: an fp16 overflow skipped it, or non-finite fp32)


def train_step(model, batches, optimizer, loss_fn, scaler=None, clip_norm: float = 0.0,
               measure_grad_norm: bool = False, sync: GradSync | None = None, rng=None) -> StepStats:
    """Forward and backward over `batches` [(src (B,S), tgt_in (B,T), tgt_out (B,T)) or None, ...], then one update.

    With `scaler` (fp16 mixed precision) the loss is scaled before backward, and an overflow
    skips the update and lowers the scale. Without one, a non-finite loss or gradient also
    skips it, and `stats.finite` is False: the caller decides (the loop stops the run).
    A `None` batch is empty: no forward, no loss, no tokens, but the same collectives.
    """
    with flush_denormals():  # trained attention weights go denormal: 4x slower without (backends/denormals.py)
        sync = GradSync(optimizer) if sync is None else sync                    # one process: nothing to sum
        real = [(j, batch) for j, batch in enumerate(batches) if batch is not None]
        first, used, n_target, src_tokens, padded = count_update(sync.comm, batches, model.config.pad_id)  # every rank's
        streams = _DropoutStreams(rng, first, used)                             # micro-batch g: its own dropout masks
        optimizer.zero_grad()
        xp = optimizer.backend.xp
        sums = xp.zeros(2, dtype=np.float64)                                     # [Σ loss, Σ nll] over target tokens
        for j, (src, tgt_in, tgt_out) in real:
            streams.select(j)
            out = model.loss(src, tgt_in, tgt_out, loss_fn)                     # loss_fn(model(src, tgt_in), tgt_out)
            refuse_in_capture("the loss weight (the batch's share of the target tokens) is a host number")
            weighted = out.loss * (out.n_tokens / max(n_target, 1))             # Σ over batches and ranks = mean over all tokens
            last = j == real[-1][0]                                              # its backward makes the gradients final
            backward(weighted if scaler is None else scaler.scale_loss(weighted),
                     on_leaf_done=sync.leaf_done if last and sync.overlap else None)
            sums += xp.stack([out.loss.data * out.n_tokens, out.nll_sum]).astype(np.float64)
        streams.finish()
        grad = sync.finish()                                                     # every gradient, one flat array, summed over ranks
        loss_sum, nll_sum = sync.comm.all_reduce(sums)                           # over every rank
        finite, stepped = _finite_and_stepping(sync.comm, grad, loss_sum, scaler)
        if not finite:
            check_ids(model, [batch for _, batch in real])                       # a bad token id comes out as NaN on a GPU
        measured = stepped and (clip_norm > 0 or measure_grad_norm)
        grad_norm = clip_grad_norm(grad, clip_norm if clip_norm > 0 else math.inf) if measured else None
        if stepped:
            optimizer.step()                                                     # §5.3: Adam at the Eq. (3) rate
    return StepStats(loss_sum, nll_sum, n_target, src_tokens, padded, grad_norm, finite, stepped)


def _finite_and_stepping(comm, grad, loss_sum, scaler) -> tuple[bool, bool]:
    """(loss and gradients finite on every rank, the optimizer is to step). fp16 (`scaler`): the gradient
    is unscaled first, and an overflow skips the step and lowers the scale; otherwise only finite steps."""
    if scaler is not None:
        finite = _agreed(comm, scaler.unscale_and_check(grad))
        return finite, scaler.update(finite)
    finite = _agreed(comm, all_finite(grad, loss_sum))
    return finite, finite


def _agreed(comm, finite: bool) -> bool:
    """True only when every rank found its loss and gradients finite: all ranks step, or skip, together."""
    return not bool(comm.all_reduce_host(np.array([not finite], np.int64), op="max")[0])


class _DropoutStreams:
    """Micro-batch g of an update (counted across ranks) draws its dropout masks from `rng` jumped g times,
    so the masks do not depend on how the micro-batches are spread over ranks (`rng` None: no dropout stream).

    `used`: the update's micro-batches up to its last real one. The generator ends jumped that many
    times, so empty batches at the end (a share that does not divide) leave no trace: the update,
    masks and generator included, is the same on any number of ranks.
    """

    def __init__(self, rng, first: int, used: int):
        self.rng, self.first, self.used = rng, first, used
        self.start = None if rng is None else rng.bit_generator.jumped(0)      # a copy of the state at the start

    def select(self, j: int) -> None:
        if self.rng is not None:
            self.rng.bit_generator.state = self.start.jumped(self.first + j).state

    def finish(self) -> None:
        """Every rank leaves the update with the same generator: the start jumped once per micro-batch used."""
        if self.rng is not None:
            self.rng.bit_generator.state = self.start.jumped(self.used).state


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
