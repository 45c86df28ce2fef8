"""Run under `mpiexec -n K python tests/train/distributed/mpi_worker.py OUT.json [NODES]`: data-parallel training checks.

With NODES, the K ranks pretend to be NODES machines of K / NODES ranks each (the node split
overridden): the local ranks and the GPU each would take go to OUT.json too.

Every rank trains a tiny float64 Transformer on its shard of the same updates through
train.run.step.train_step and train.distributed.grad_sync.GradSync over MPI. Rank 0 then trains the
references in one process and writes what the tests compare to OUT.json:

  accum      k ranks vs one process with all k shares as accumulation micro-batches (dropout on)
  concat     k ranks vs one process on the concatenation of the same batches (dropout off)
  uneven     updates whose batch count does not divide by k (shards padded with empty batches)
  overlap    bucketed all-reduce during backward (many tiny buckets) vs one all-reduce after it
  control    the accumulation reference with the dropout masks drawn in sequence: must differ
  nan_rank1  a NaN loss on rank 1 only: every rank skips the update (the fp16 loss scaler too)
  replicas   check_replicas passes, then fails naming rank 1 once rank 1's weights are nudged

Ranks start from different weights (seed 100 + rank): broadcast_parameters must fix that.
Shapes: B pairs, S source length, T target length.
"""
import json
import sys
import time

import numpy as np
from mpi4py import MPI

from minitensor.optim import Adam, NoamSchedule
from train.data.batching import shard
from train.distributed.communicators import Mpi
from train.distributed.launch import device_index
from train.distributed.grad_sync import GradSync, ReplicaMismatchError
from train.run.loss_scaler import DynamicLossScaler
from train.run.step import _agreed, train_step
from transformer import LabelSmoothingLoss, Transformer, TransformerConfig

STEPS, PER_RANK, VOCAB = 3, 2, 13


def micro_batch(rng):
    """(src (B,S), tgt_in (B,T), tgt_out (B,T)) with random shapes and padding."""
    B, S, T = rng.integers(2, 5), rng.integers(3, 9), rng.integers(3, 9)
    src = rng.integers(4, VOCAB, (B, S))
    tgt = rng.integers(4, VOCAB, (B, T))
    for row in range(B):
        src[row, rng.integers(1, S + 1):] = 0
        tgt[row, rng.integers(1, T + 1):] = 0
    tgt_in = np.concatenate([np.full((B, 1), 2), tgt[:, :-1]], axis=1)
    return src, np.where(tgt_in == 0, 0, tgt_in), tgt


def concatenate(batches):
    """One batch holding every row of `batches` (padded to the longest): the same loss, one forward."""
    real = [b for b in batches if b is not None]
    widths = [max(b[i].shape[1] for b in real) for i in range(3)]
    return tuple(np.concatenate([np.pad(b[i], ((0, 0), (0, widths[i] - b[i].shape[1]))) for b in real])
                 for i in range(3))


class Trainer:
    def __init__(self, comm, p_drop, seed, bucket_mb=0.0, scaler=False):
        config = TransformerConfig(vocab_size=VOCAB, N=2, d_model=8, d_ff=16, h=2, p_drop=p_drop,
                                   attention_dropout=p_drop, max_len=32)
        self.rng = np.random.default_rng(seed)
        self.model = Transformer(config, self.rng, precision="fp64")
        self.rng.bit_generator.state = np.random.default_rng(0).bit_generator.state   # dropout: the same on every rank
        self.optimizer = Adam(list(self.model.named_parameters()), lr=NoamSchedule(8, warmup=4))
        self.loss_fn = LabelSmoothingLoss(config.eps_ls, config.pad_id, config.impl)
        self.scaler = DynamicLossScaler(init_scale=2.0 ** 10) if scaler else None
        self.sync = GradSync(self.optimizer, comm, bucket_mb)
        self.sync.broadcast_parameters()

    def step(self, batches, sequential_dropout=False):
        return train_step(self.model, batches, self.optimizer, self.loss_fn, self.scaler, clip_norm=1.0,
                          sync=self.sync, rng=None if sequential_dropout else self.rng)

    def weights(self):
        return self.optimizer.flat_parameters().copy()

    def key_bias_mask(self):
        """True on the elements of the key projections' biases (see `relative`)."""
        mask = np.zeros(self.optimizer.offsets[-1], bool)
        for i, (name, _) in enumerate(self.optimizer.named_params):
            mask[self.optimizer.offsets[i]:self.optimizer.offsets[i + 1]] = name.endswith("w_k.bias")
        return mask


def updates(world, count, seed=1):
    rng = np.random.default_rng(seed)
    return [[micro_batch(rng) for _ in range(count)] for _ in range(STEPS)]


def train_ranks(comm, data, **options):
    trainer = Trainer(comm, seed=100 + comm.rank, **options)
    for update in data:
        trainer.step(shard(update, comm.rank, comm.world_size))
    return trainer.weights()


def train_one(data, world, concat=False, sequential_dropout=False, **options):
    """One process: each update's k shares in rank order (padding included) as micro-batches, or as one batch."""
    trainer = Trainer(Mpi(MPI.COMM_SELF), seed=100, **options)
    for update in data:
        batches = [b for rank in range(world) for b in shard(update, rank, world)]
        trainer.step([concatenate(batches)] if concat else batches, sequential_dropout)
    return trainer.weights()


def relative(a, b, mask) -> float:
    """max |a - b| / max |b| over the weights outside `mask`.

    The key projection's bias has a gradient of exactly 0 (it shifts a whole row of scores,
    which softmax ignores, §3.2.1): what is computed is roundoff (~1e-17) that depends on the
    order of the sums, and Adam divides it by √v + ε, so these weights wander at ~1e-10 between
    any two summation orders (tests/transformer/test_composed_vs_fused.py). They are compared
    on their own, in absolute terms.
    """
    return float(np.abs(a - b)[~mask].max() / np.abs(b).max())


def wait_for_rank0(comm):
    """Wait without spinning (MPI busy-polls in a blocking barrier): ranks may outnumber cores."""
    request = comm.comm.Ibarrier()
    while not request.Test():
        time.sleep(0.01)


def node_layout(comm) -> dict:
    """This rank's place on its (simulated) node, and the GPU it would take there."""
    return {"local_rank": comm.local_rank, "local_size": comm.local_size,
            "device": device_index(comm.local_rank, comm.local_size, device_count=comm.local_size)}


def main(out_path, nodes=None):
    per_node = None if nodes is None else MPI.COMM_WORLD.Get_size() // int(nodes)
    comm = Mpi(node_of=None if per_node is None else lambda rank: rank // per_node)
    world = comm.world_size
    even, uneven = updates(world, world * PER_RANK), updates(world, world * PER_RANK - 1, seed=2)
    dp = {"accum": train_ranks(comm, even, p_drop=0.1),
          "concat": train_ranks(comm, even, p_drop=0.0),
          "uneven": train_ranks(comm, uneven, p_drop=0.1),
          "overlap": train_ranks(comm, even, p_drop=0.1, bucket_mb=1e-4)}   # 100-byte buckets: one or two tensors each

    nan_trainer = Trainer(comm, p_drop=0.1, seed=100, scaler=True)
    before = nan_trainer.weights()
    poisoned = shard(even[0], comm.rank, world)
    if comm.rank == 1:
        loss_fn = nan_trainer.loss_fn
        nan_trainer.loss_fn = lambda logits, tgt: _nan_loss(loss_fn(logits, tgt))
    stats = nan_trainer.step(poisoned)
    nan_result = {"stepped": bool(stats.stepped), "scale": nan_trainer.scaler.scale,
                  "unchanged": bool((nan_trainer.weights() == before).all()),
                  "agreed_false": _agreed(comm, comm.rank != 1)}

    replica_trainer = Trainer(comm, p_drop=0.1, seed=100)
    replica_trainer.step(shard(even[0], comm.rank, world))
    replica_trainer.sync.check_replicas()                        # must pass
    if comm.rank == 1:
        replica_trainer.optimizer.flat[0] += 1e-12
    try:
        replica_trainer.sync.check_replicas()
        replica_error = None
    except ReplicaMismatchError as err:
        replica_error = str(err)

    gathered = comm.comm.gather({"nan": nan_result, "replica_error": replica_error, "node": node_layout(comm),
                                 "dp_equal_to_rank0": {k: bool((v == comm.comm.bcast(v, root=0)).all())
                                                       for k, v in dp.items()}}, root=0)
    if comm.rank != 0:
        wait_for_rank0(comm)
        return
    reference = {"accum": train_one(even, world, p_drop=0.1),
                 "concat": train_one(even, world, concat=True, p_drop=0.0),
                 "uneven": train_one(uneven, world, p_drop=0.1)}
    control = train_one(even, world, sequential_dropout=True, p_drop=0.1)
    fresh = Trainer(Mpi(MPI.COMM_SELF), p_drop=0.1, seed=100, bucket_mb=1e-4)
    mask = fresh.key_bias_mask()
    result = {
        "world_size": world,
        "relative": {name: relative(dp[name], reference[name], mask) for name in reference},
        "key_bias_abs": {name: float(np.abs(dp[name] - reference[name])[mask].max()) for name in reference},
        "overlap_identical": bool((dp["overlap"] == dp["accum"]).all()),
        "control": relative(control, reference["accum"], mask),
        "moved": relative(reference["accum"], fresh.weights(), mask),
        "buckets": len(fresh.sync.buckets),
        "ranks": gathered,
    }
    with open(out_path, "w", encoding="utf-8") as out:
        json.dump(result, out, indent=1)
    wait_for_rank0(comm)


def _nan_loss(out):
    out.loss = out.loss * float("nan")
    return out


if __name__ == "__main__":
    main(*sys.argv[1:3])
