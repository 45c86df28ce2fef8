"""One global batch whatever the world size: the update's tokens split into ranks × micro-batches (§5.1).

§5.1: "Each training batch contained a set of sentence pairs containing approximately 25000
source tokens and 25000 target tokens." That is the update, over every device. The config says
it once, `train.tokens_per_update` (padded tokens per side; 0 = `train.max_tokens`, one batch),
and `train.max_tokens`, what one device holds in one micro-batch. From those and the world
size k, a fresh run derives

    accum        = ceil(tokens_per_update / (k · max_tokens))     micro-batches per rank
    batches      = k · accum                                      micro-batches per update (G)
    batch_tokens = floor(tokens_per_update / batches)             each micro-batch's budget (≤ max_tokens)

so the WMT config (25,000 tokens, 6,250 a device) is 4 × 6,250 on one GPU, 2 × 2 × 6,250 on
two and 8 × 1 × 3,125 on eight: the same ~25,000 tokens per update everywhere.

A checkpoint records the plan. Resuming keeps its batches and batch_tokens (the epoch is cut
into batches of batch_tokens, and the data position counts them), whatever the world size
now: k' ranks take ceil(G / k') each, the last ones padded with empty batches when k' does
not divide G (the same update, one rank idle for a micro-batch). More ranks than batches
cannot keep the update and are refused with a one-line error naming both world sizes.

Within an update, `count_update` gives each rank its share's place and the update's token
counts over every rank, which train_step (train/run/step.py) normalises the loss by.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import NamedTuple

import numpy as np

from train.errors import InputError


@dataclass(frozen=True)
class UpdatePlan:
    """How one update's micro-batches are spread over the ranks."""

    world_size: int
    batches: int            # micro-batches per update, over every rank (G)
    batch_tokens: int       # padded tokens per side of one micro-batch: the budget the epoch is cut with

    @property
    def accum(self) -> int:
        """Micro-batches per rank (the last ranks' shares padded with empty ones when G % k != 0)."""
        return -(-self.batches // self.world_size)

    @property
    def tokens_per_update(self) -> int:
        return self.batches * self.batch_tokens

    @property
    def tokens_per_rank(self) -> int:
        return self.accum * self.batch_tokens

    def record(self) -> dict:
        """What a checkpoint stores (train/run/checkpointing.py)."""
        return {**asdict(self), "accum": self.accum, "tokens_per_rank": self.tokens_per_rank,
                "tokens_per_update": self.tokens_per_update}

    def describe(self) -> str:
        ranks = f"{self.world_size} rank{'s' if self.world_size > 1 else ''}"
        idle = self.world_size * self.accum - self.batches
        uneven = f"; {idle} empty micro-batch slot{'s' if idle > 1 else ''} (the shares do not divide)" if idle else ""
        return (f"update: {self.tokens_per_update:,} padded tokens per side = {ranks} × {self.accum} "
                f"micro-batch{'es' if self.accum > 1 else ''} of ≤ {self.batch_tokens:,} tokens{uneven}")


def plan_update(train, world_size: int) -> UpdatePlan:
    """A fresh run's plan from `train` (train.config.TrainConfig): the update's tokens on `world_size` ranks."""
    total = train.tokens_per_update or train.max_tokens
    accum = math.ceil(total / (world_size * train.max_tokens))
    batches = world_size * accum
    return UpdatePlan(world_size, batches, total // batches)


def resumed_plan(saved: dict, world_size: int, where: str) -> UpdatePlan:
    """The plan of a checkpoint's record on `world_size` ranks: the same update, or an InputError."""
    plan = UpdatePlan(world_size, int(saved["batches"]), int(saved["batch_tokens"]))
    if world_size > plan.batches:
        raise InputError(f"{where}: written by {saved['world_size']} rank(s) with {plan.batches} micro-batches of "
                         f"≤ {plan.batch_tokens:,} tokens per update; {world_size} ranks cannot share them without "
                         f"changing the update: resume on at most {plan.batches} ranks")
    return plan


class UpdateCounts(NamedTuple):
    """One update seen from one rank: where its share sits in the update, and the update's tokens over every rank."""

    first: int            # the update's index of this rank's first micro-batch (micro-batches counted across ranks)
    used: int             # the update's micro-batches up to its last non-empty one
    target_tokens: int    # non-pad target tokens, every rank's
    source_tokens: int    # non-pad source tokens, every rank's
    padded_tokens: int    # source + target positions including padding (B·S + B·T per batch), every rank's


def count_update(comm, batches, pad_id: int) -> UpdateCounts:
    """This rank's share `batches` [(src, tgt_in, tgt_out) or None, ...] counted, then summed over ranks (one all-reduce).

    Data parallelism (§5.2: 8 GPUs): over k ranks, each rank passes its own share of the
    update's batches (the same number on every rank, `None` for an empty one), and the update
    is the one a single process would make on all k shares as micro-batches: the loss is
    normalised by the global number of target tokens counted here, the gradients are summed
    once, after the last micro-batch, and every decision (skip on overflow, stop on divergence)
    is agreed by all ranks (train/run/step.py). Micro-batch g of the update, counted across
    ranks (`first` + its place in the share), draws its dropout masks from its own stream, so
    the masks do not depend on how the micro-batches are spread over ranks either.
    """
    real = [(j, batch) for j, batch in enumerate(batches) if batch is not None]
    local = [(int((tgt_out != pad_id).sum()), int((src != pad_id).sum()), src.size + tgt_out.size)
             for _, (src, _, tgt_out) in real]                             # per batch: target, source, padded
    first = comm.rank * len(batches)                                         # this share's place in the update
    ends = np.zeros(comm.world_size, np.int64)                               # per rank: where its real batches end
    ends[comm.rank] = first + real[-1][0] + 1 if real else 0
    totals = comm.all_reduce_host(np.concatenate([np.array(local, np.int64).reshape(-1, 3).sum(axis=0), ends]))
    return UpdateCounts(first, int(totals[3:].max()), *(int(n) for n in totals[:3]))
