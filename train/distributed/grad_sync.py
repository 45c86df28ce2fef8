"""Gradients summed across data-parallel ranks, bucket by bucket, while the backward pass still runs.

    sync = GradSync(optimizer, comm, bucket_mb=25)
    backward(loss, on_leaf_done=sync.leaf_done)    # the last micro-batch of the update
    grad = sync.finish()                            # optimizer.gather_grads(), summed over every rank

The optimizer keeps every gradient in one flat array (minitensor.optim.Adam.gather_grads);
the all-reduce works in place on it, once per update, after the last accumulation micro-batch.

Buckets are contiguous ranges of that array of about `bucket_mb` MB, cut from the last
parameter backwards: backward finishes the layers nearest the loss first, so the buckets at
the end of the parameter order fill first. A bucket is gathered and its all-reduce started
(MPI_Iallreduce on CPU ranks, a side CUDA stream with NCCL) as soon as autograd reports every
parameter in it final (`leaf_done`). Buckets start strictly in the order 0, 1, 2, ... on every
rank, because collectives must be issued in the same order everywhere: a bucket that fills
early waits for those before it. Whatever has not started when backward returns (parameters
that got no gradient; a rank whose batches were all empty) starts in `finish()`, which then
waits for every bucket. bucket_mb = 0 turns the overlap off: one all-reduce after backward.
"""
from __future__ import annotations

import numpy as np

from train.distributed.communicators import SingleProcess


class ReplicaMismatchError(RuntimeError):
    """The ranks' weights differ after an update: a bug in data-parallel training."""


def buckets(sizes: list[int], itemsize: int, bucket_bytes: float) -> list[tuple[int, int]]:
    """Parameter ranges [first, last) of about `bucket_bytes` each, from the last parameter backwards (launch order)."""
    if bucket_bytes <= 0:
        return [(0, len(sizes))]
    ranges, last, filled = [], len(sizes), 0
    for i in reversed(range(len(sizes))):
        filled += sizes[i] * itemsize
        if filled >= bucket_bytes:
            ranges.append((i, last))
            last, filled = i, 0
    if last > 0:
        ranges.append((0, last))
    return ranges


class GradSync:
    """Sums the optimizer's flat gradient over the ranks of `comm`, overlapping backward when bucket_mb > 0."""

    def __init__(self, optimizer, comm=None, bucket_mb: float = 0.0):
        self.optimizer = optimizer
        self.comm = SingleProcess() if comm is None else comm
        self.overlap = bucket_mb > 0
        params = optimizer.params
        self.buckets = buckets([p.size for p in params], np.dtype(optimizer.dtype).itemsize, bucket_mb * 1e6)
        self.bucket_of = {id(p): b for b, (first, last) in enumerate(self.buckets) for p in params[first:last]}
        self._reset()

    def _reset(self) -> None:
        self.missing = [last - first for first, last in self.buckets]   # parameters not final yet, per bucket
        self.started, self.handles = 0, []

    def leaf_done(self, leaf) -> None:
        """autograd's on_leaf_done: `leaf.grad` is final; start every bucket that is now complete, in order."""
        bucket = self.bucket_of.get(id(leaf))
        if bucket is not None:
            self.missing[bucket] -= 1
            self._start(flush=False)

    def _start(self, flush: bool) -> None:
        offsets = self.optimizer.offsets
        while self.started < len(self.buckets) and (flush or self.missing[self.started] == 0):
            first, last = self.buckets[self.started]
            flat = self.optimizer.gather_grads(first, last)                          # this bucket's gradients
            self.handles.append(self.comm.all_reduce_async(flat[offsets[first]:offsets[last]]))
            self.started += 1

    def finish(self):
        """Start what is left, wait for every bucket, and return the summed flat gradient."""
        self._start(flush=True)
        for handle in self.handles:
            handle.wait()
        self._reset()
        return self.optimizer.gather_grads()

    def broadcast_parameters(self) -> None:
        """Rank 0's weights and Adam moments on every rank (they are built from the same seed; this makes sure)."""
        for buffer in (self.optimizer.flat_parameters(), self.optimizer.m, self.optimizer.v):
            self.comm.broadcast(buffer)

    def check_replicas(self) -> None:
        """Debug: raise ReplicaMismatchError (on every rank) unless every rank holds exactly rank 0's weights."""
        flat = self.optimizer.flat_parameters()
        reference = self.comm.broadcast(flat.copy())
        diffs = np.zeros(self.comm.world_size)
        diffs[self.comm.rank] = float(abs(flat - reference).max()) if flat.size else 0.0
        diffs = self.comm.all_reduce_host(diffs)
        bad = [rank for rank, diff in enumerate(diffs) if diff != 0]
        if bad:
            raise ReplicaMismatchError(f"the weights of rank(s) {bad} differ from rank 0's after the update "
                                       f"(largest |difference| {diffs.max():.3g})")
