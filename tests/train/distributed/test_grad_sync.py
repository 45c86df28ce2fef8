"""Data parallelism in one process: buckets, the all-reduce during backward, sharding, agreement, abort."""
import numpy as np
import pytest

from minitensor.autograd import backward
from minitensor.optim import Adam, NoamSchedule
from train.data.batching import shard
from train.distributed import communicators
from train.distributed.communicators import SingleProcess, abort_on_error, agree_on_signal
from train.distributed.grad_sync import GradSync, buckets
from train.run.step import train_step
from transformer import LabelSmoothingLoss, Transformer, TransformerConfig


class RecordingComm(SingleProcess):
    """One rank that remembers what each all-reduce saw when it started."""

    def __init__(self):
        self.started = []

    def all_reduce_async(self, array, op="sum"):
        self.started.append(array.copy())
        return communicators.Done()


def tiny(seed=0, p_drop=0.1):
    config = TransformerConfig(vocab_size=13, N=2, d_model=8, d_ff=16, h=2, p_drop=p_drop, max_len=32)
    rng = np.random.default_rng(seed)
    model = Transformer(config, rng, precision="fp64")
    optimizer = Adam(list(model.named_parameters()), lr=NoamSchedule(8, warmup=4))
    return model, optimizer, LabelSmoothingLoss(config.eps_ls, config.pad_id, config.impl), rng


def batch(rng, B=3, S=6, T=5):
    src, tgt = rng.integers(4, 13, (B, S)), rng.integers(4, 13, (B, T))
    src[0, 4:], tgt[1, 3:] = 0, 0
    return src, np.concatenate([np.full((B, 1), 2), tgt[:, :-1]], axis=1), tgt


def test_buckets_cover_every_parameter_once_from_the_last_backwards():
    sizes = [5, 100, 3, 40, 40, 7]
    ranges = buckets(sizes, itemsize=4, bucket_bytes=160)             # 40 floats a bucket
    assert ranges == [(4, 6), (3, 4), (1, 3), (0, 1)]
    covered = sorted(i for first, last in ranges for i in range(first, last))
    assert covered == list(range(len(sizes)))
    assert all(sum(sizes[first:last]) * 4 >= 160 for first, last in ranges[:-1])
    assert buckets(sizes, 4, 0) == [(0, 6)]                             # no overlap: one all-reduce


def test_buckets_start_during_backward_in_order_and_only_when_final():
    model, optimizer, loss_fn, rng = tiny()
    comm = RecordingComm()
    sync = GradSync(optimizer, comm, bucket_mb=2e-4)                   # 200 bytes: many buckets
    optimizer.zero_grad()
    src, tgt_in, tgt_out = batch(rng)
    backward(loss_fn(model(src, tgt_in), tgt_out).loss, on_leaf_done=sync.leaf_done)
    assert len(sync.buckets) > 10 and len(comm.started) == len(sync.buckets)   # all started before backward returned
    final = np.concatenate([p.grad.reshape(-1) for p in optimizer.params])      # the gradients once backward is done
    offsets = optimizer.offsets
    for (first, last), seen in zip(sync.buckets, comm.started):                 # in launch order
        np.testing.assert_array_equal(seen, final[offsets[first]:offsets[last]])   # nothing was added after the start
    np.testing.assert_array_equal(sync.finish(), final)


def test_overlap_on_and_off_and_no_sync_train_the_same():
    runs = []
    for bucket_mb in (None, 0.0, 1e-4):
        model, optimizer, loss_fn, rng = tiny()
        data = np.random.default_rng(5)
        sync = None if bucket_mb is None else GradSync(optimizer, SingleProcess(), bucket_mb)
        for _ in range(3):
            train_step(model, [batch(data), None, batch(data)], optimizer, loss_fn, clip_norm=1.0, sync=sync, rng=rng)
        runs.append((optimizer.flat_parameters().copy(), rng.bit_generator.state))
    for flat, state in runs[1:]:
        np.testing.assert_array_equal(flat, runs[0][0])
        assert state == runs[0][1]


def test_empty_batches_add_nothing():
    model, optimizer, loss_fn, rng = tiny(p_drop=0.0)
    b = batch(np.random.default_rng(3))
    with_empty = train_step(model, [None, b, None], optimizer, loss_fn)
    model2, optimizer2, loss_fn2, _ = tiny(p_drop=0.0)
    alone = train_step(model2, [b], optimizer2, loss_fn2)
    assert (with_empty.tgt_tokens, with_empty.src_tokens, with_empty.padded_tokens) == \
        (alone.tgt_tokens, alone.src_tokens, alone.padded_tokens)
    assert float(with_empty.loss_sum) == float(alone.loss_sum)
    np.testing.assert_array_equal(optimizer.flat_parameters(), optimizer2.flat_parameters())
    nothing = train_step(model, [None, None], optimizer, loss_fn)
    assert nothing.tgt_tokens == 0 and float(nothing.loss_sum) == 0.0


def test_micro_batch_g_draws_its_dropout_masks_from_rng_jumped_g_times():
    data = np.random.default_rng(2)
    batches = [batch(data), batch(data)]
    model, optimizer, loss_fn, rng = tiny()
    start = rng.bit_generator.jumped(0)
    stats = train_step(model, batches, optimizer, loss_fn, rng=rng)
    assert rng.bit_generator.state == start.jumped(2).state             # every rank ends the update here
    expected = 0.0
    for g, (src, tgt_in, tgt_out) in enumerate(batches):                # the same weights, each stream by hand
        model_g, _, loss_g, rng_g = tiny()
        model_g.train()
        rng_g.bit_generator.state = start.jumped(g).state
        out = loss_g(model_g(src, tgt_in), tgt_out)
        expected += float(out.loss.data) * out.n_tokens
    assert float(stats.loss_sum) == pytest.approx(expected, rel=1e-14)
    model_s, _, loss_s, rng_s = tiny()
    model_s.train()
    sequential = sum(float(out.loss.data) * out.n_tokens
                     for out in (loss_s(model_s(s, i), o) for s, i, o in batches))  # one stream: other masks
    assert float(stats.loss_sum) != pytest.approx(sequential, rel=1e-6)


def test_shard_gives_each_rank_an_equal_block_padded_with_empty_batches():
    update = list("abcde")
    shares = [shard(update, rank, 2) for rank in range(2)]
    assert shares == [["a", "b", "c"], ["d", "e", None]]
    for world in (1, 2, 3, 4, 7):
        shares = [shard(update, rank, world) for rank in range(world)]
        assert len({len(s) for s in shares}) == 1                       # the same number of micro-batches
        assert [b for s in shares for b in s if b is not None] == update  # rank order = the global order


def test_single_process_collectives_leave_their_input():
    comm = SingleProcess()
    values = np.array([1.0, 2.0])
    assert comm.all_reduce(values) is values and comm.broadcast(values) is values
    assert agree_on_signal(comm, None) is None and agree_on_signal(comm, "SIGTERM") == "SIGTERM"
    assert comm.all_gather_json({"a": 1}) == [{"a": 1}]


def test_abort_on_error_names_the_rank_and_uses_the_exit_code(capsys, monkeypatch):
    monkeypatch.setattr(communicators, "ABORT_GRACE_S", 0.0)
    class Rank(SingleProcess):
        rank, world_size = 1, 4

        def __init__(self):
            self.aborted = None

        def abort(self, code=1):
            self.aborted = code

    comm = Rank()
    with abort_on_error(comm, {ValueError: 2}):
        raise ValueError("bad input")
    assert comm.aborted == 2
    assert "error: rank 1 of 4: bad input; ending the job" in capsys.readouterr().err
    with abort_on_error(comm, {ValueError: 2}):
        raise RuntimeError("bug")
    assert comm.aborted == 1 and "Traceback" in capsys.readouterr().err
    with pytest.raises(ValueError):
        with abort_on_error(SingleProcess(), {ValueError: 2}):      # one process: the usual handling
            raise ValueError("bad input")
