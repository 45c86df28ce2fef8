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
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

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
