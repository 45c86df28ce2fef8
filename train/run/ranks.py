"""Before the first update: how the update is split over the ranks, and every rank agreeing to it (§5.1, §5.2).

    plan, how = update_plan(run_config.train, comm.world_size, resumed)   # before the data is cut into batches
    join(comm, state, resumed, sync, say)                                   # after the state is restored

A fresh run derives the plan from train.tokens_per_update and train.max_tokens; a resumed one
keeps its checkpoint's (train/distributed/global_batch.py). `join` then has every rank compare
what it is about to train (train/distributed/agreement.py), gives every rank rank 0's weights and
Adam moments, and says how the update is split. With one process it only says the plan.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from train.distributed.agreement import check_agreement
from train.distributed.global_batch import UpdatePlan, plan_update, resumed_plan
from train.run.checkpointing import TrainState, recorded_update
from transformer.checkpoint import content_digest


def update_plan(train, world_size: int, resumed: Path | None) -> tuple[UpdatePlan, str]:
    """(the plan, where it comes from in words): the checkpoint's, kept on any world size, or the config's."""
    saved = recorded_update(resumed) if resumed is not None else None
    if saved is None:
        how = (f"train.tokens_per_update {train.tokens_per_update:,}" if train.tokens_per_update
               else "train.tokens_per_update 0 = one micro-batch") + f", train.max_tokens {train.max_tokens:,} a device"
        return plan_update(train, world_size), how
    return resumed_plan(saved, world_size, resumed.name), f"kept from {resumed.name}, written by {saved['world_size']} rank(s)"


def agreement_fields(state: TrainState, resumed: Path | None) -> dict:
    """What every rank must hold alike before the first update (only the weights and Adam's moments are broadcast)."""
    return {"config": state.run_config.to_dict(), "update plan": state.plan.record(),
            "step and data position": dataclasses.asdict(state.progress),
            "RNG state": state.rng.bit_generator.state,
            "loss scale": state.scaler.state_dict() if state.scaler is not None else None,
            "checkpoint": None if resumed is None else {"file": resumed.name, "sha256": content_digest(resumed)}}


def join(comm, state: TrainState, resumed: Path | None, sync, say, how: str) -> None:
    """Every rank agrees (or all stop with the fields and ranks that differ), then takes rank 0's weights."""
    check_agreement(comm, agreement_fields(state, resumed))
    sync.broadcast_parameters()                # every rank starts from rank 0's weights
    say(f"{state.plan.describe()} ({how})")
    if comm.world_size > 1:
        ranks = comm.describe()                # collective: every rank takes part
        say(f"data parallel over {comm.world_size} ranks, {state.plan.accum} micro-batch(es) each per update; {ranks}")
